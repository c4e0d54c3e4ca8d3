"""What happened at a boundary, in a few words, from the snapshot saved before it and its own.

Pure and cheap: it compares counts and phases (tasks done, turns, committed tool calls,
approvals), never whole conversations, so every save of a history-keeping journal can afford
it. ``oma checkpoint history`` prints it beside each boundary.
"""

from __future__ import annotations

from typing import Any


def note(
    before: dict[str, Any] | None, after: dict[str, Any], *, began: bool
) -> tuple[str | None, str]:
    """The task the boundary concerns (``None``: the run as a whole) and what happened."""
    attempt = _dig(after, "identity", "attempt")
    first = not isinstance(attempt, int) or attempt <= 1
    if began:  # a new attempt's claim: the state it found, saved again
        return None, "run started" if first else f"attempt {attempt} began"
    if before is None:  # an attempt's first save without a claim (an unfenced run)
        return None, "run started" if first else f"attempt {attempt} went on"
    for field, verb in (("completed", "completed"), ("failed", "failed"), ("skipped", "skipped")):
        new = _added(_dig(before, "queue", field), _dig(after, "queue", field))
        if new:
            return _task_id(new[0]), f"task {verb}"
    approvals = _added(before.get("pendingApprovals"), after.get("pendingApprovals"))
    if approvals:
        return _task_of(approvals[0]), "approval requested"
    decisions = _added(before.get("approvalDecisions"), after.get("approvalDecisions"))
    if decisions:
        return _task_of(decisions[0]), "approval decided"
    earlier = {t.get("taskId"): t for t in _tasks(before)}
    for task in _tasks(after):
        task_id = task.get("taskId")
        old = earlier.get(task_id)
        if old is None:
            return _text(task_id), "task started"
        committed = _committed(task) - _committed(old)
        if committed > 0:
            return _text(task_id), f"{committed} tool call{'s' if committed > 1 else ''} committed"
        if task.get("turns") != old.get("turns"):
            return _text(task_id), f"turn {task.get('turns')}: the model replied"
        if task.get("phase") != old.get("phase"):
            return _text(task_id), _PHASES.get(str(task.get("phase")), f"phase {task.get('phase')}")
    gone = set(earlier) - {t.get("taskId") for t in _tasks(after)}
    if gone:
        return _text(sorted(map(str, gone))[0]), "task left in flight"
    tasks = _dig(after, "queue", "tasks")
    if (
        isinstance(tasks, list)
        and tasks
        and all(isinstance(t, dict) and t.get("status") == "completed" for t in tasks)
    ):
        return None, "run finished"
    return None, "saved"


_PHASES = {
    "awaiting_model": "tool results in: the next turn asks the model",
    "executing_tools": "tools running",
}


def _dig(document: Any, *path: str) -> Any:
    for step in path:
        if not isinstance(document, dict):
            return None
        document = document.get(step)
    return document


def _added(before: Any, after: Any) -> list[Any]:
    """What ``after`` holds past ``before``'s length (both lists: they only grow)."""
    if not isinstance(after, list):
        return []
    return after[len(before) :] if isinstance(before, list) else after


def _tasks(document: dict[str, Any]) -> list[dict[str, Any]]:
    tasks = document.get("inFlightTasks")
    return [t for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []


def _committed(task: dict[str, Any]) -> int:
    calls = task.get("pendingToolCalls")
    done = task.get("toolCalls")
    pending = (
        sum(1 for c in calls if isinstance(c, dict) and "commit" in c)
        if isinstance(calls, list)
        else 0
    )
    return pending + (len(done) if isinstance(done, list) else 0)


def _task_id(item: Any) -> str | None:
    if isinstance(item, dict):
        return _text(item.get("id") or item.get("taskId"))
    return _text(item)


def _task_of(item: Any) -> str | None:
    return _text(item.get("taskId")) if isinstance(item, dict) else None


def _text(value: Any) -> str | None:
    return value[:256] if isinstance(value, str) else None
