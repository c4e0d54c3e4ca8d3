"""The run-level approval gates a caller configures (``OpenMultiAgent(on_plan_ready=...)``).

Configuration only: how a gate's answer suspends, rejects or goes on is ``gating``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oma.approval.gates import ToolCallGate
from oma.tasks.task import Task


@dataclass
class Gates:
    on_plan_ready: Callable[[list[Task]], Any] | None = None
    on_task_dispatch: Callable[[Task], Any] | None = None
    on_approval: Callable[[list[Task], list[Task]], Any] | None = None
    on_tool_call: ToolCallGate | None = None
