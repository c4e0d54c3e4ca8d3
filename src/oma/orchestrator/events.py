"""Progress events: what ``on_progress`` receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

EventType = Literal[
    "agent_start",
    "agent_complete",
    "task_start",
    "task_complete",
    "task_skipped",
    "task_retry",
    "approval_pending",
    "checkpoint_saved",
    "tool_call",
    "message",
    "warning",
    "error",
]


@dataclass(frozen=True)
class OrchestratorEvent:
    type: EventType
    agent: str | None = None
    task: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


ProgressCallback = Callable[[OrchestratorEvent], None]
