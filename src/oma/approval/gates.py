"""What approval gates answer: allow, deny or suspend (booleans still mean allow/deny)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from oma.errors import OmaError


@dataclass(frozen=True)
class Allow:
    """A gate's answer: go ahead."""


@dataclass(frozen=True)
class Deny:
    """A gate's answer: do not; ``reason`` is told to the model (a tool call) or the run."""

    reason: str | None = None


@dataclass(frozen=True)
class Suspend:
    """Stop here durably until a human decides on exactly this content."""

    reason: str | None = None


GateOutcome = Allow | Deny | Suspend
GateAnswer = bool | GateOutcome | dict[str, Any]


class InvalidGateDecisionError(OmaError):
    """Raised when an approval gate answers something other than a bool, an ``Allow``, ``Deny``
    or ``Suspend``, or ``{"action": "allow"|"deny"|"suspend", "reason"?: str}``."""

    code = "INVALID_APPROVAL_DECISION"


def normalize_decision(answer: object) -> GateOutcome:
    """``True``/``False``, an ``Allow``/``Deny``/``Suspend``, or ``{"action": ..., "reason"?}``."""
    if answer is True:
        return Allow()
    if answer is False:
        return Deny()
    if isinstance(answer, Allow | Deny | Suspend):
        return answer
    if isinstance(answer, dict):
        action, reason = answer.get("action"), answer.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidGateDecisionError(f"invalid approval decision: reason {reason!r}")
        if action == "allow":
            return Allow()
        if action == "deny":
            return Deny(reason)
        if action == "suspend":
            return Suspend(reason)
    raise InvalidGateDecisionError(
        f"invalid approval decision {answer!r}: answer True, False, Allow(), Deny(reason) or "
        "Suspend(reason)"
    )


async def ask_gate(gate: Callable[..., Any], *args: Any) -> GateOutcome:
    """Call a sync or async gate and normalize its answer (exceptions propagate)."""
    answer = gate(*args)
    if inspect.isawaitable(answer):
        answer = await answer
    return normalize_decision(answer)


@dataclass(frozen=True)
class ToolCallGateContext:
    """What an ``on_tool_call`` gate is asked about: the tool, its validated and raw input, the
    agent, whether the tool is consequential, and where the call is (run, task, call id)."""

    tool_name: str
    input: dict[str, Any]
    raw_input: dict[str, Any]
    agent_name: str
    consequential: bool
    run_id: str
    task_id: str | None
    tool_call_id: str


ToolCallGate = Callable[[ToolCallGateContext], GateAnswer | Awaitable[GateAnswer]]
