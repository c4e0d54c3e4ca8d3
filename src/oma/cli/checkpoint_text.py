"""The plain-text report of ``oma checkpoint show`` (``--json`` prints the summary itself)."""

from __future__ import annotations

from oma.checkpoint.attempts import AttemptRecord
from oma.checkpoint.summary import CheckpointSummary, RunEndLine

_STATE_TEXT = {
    "committed": "committed (replayed on resume, never run again)",
    "not_committed": "not committed: runs again on resume (same tool_call_id)",
    "uncertain": "started, not committed: may or may not have happened (a reviewer decides)",
    "awaiting_approval": "awaiting approval",
    "approved_not_run": "approved, runs on resume",
    "recorded_done": "recorded as done by a reviewer (not run again; the model gets their record)",
    "rejected": "rejected (the model sees a denial)",
}


def render(summary: CheckpointSummary) -> list[str]:
    """The plain-text report: ids and hashes are never truncated (they are meant to be copied)."""
    attempt = f"attempt {summary.attempt}" if summary.attempt is not None else "attempt 1"
    lines = [
        f"run       {summary.run_id or '(default key)'}  ({attempt}, snapshot v{summary.version},"
        f" {summary.mode}, saved {summary.saved_at})",
        f"key       {summary.key}",
    ]
    if summary.trace_id is not None:
        lines.append(f"trace     {summary.trace_id}  (every attempt's spans)")
    if summary.forked_from is not None:
        origin = summary.forked_from
        patched = f", patched (sha256 {origin.patch_sha256})" if origin.patch_sha256 else ""
        lines.append(
            f"forked    from {origin.run_id} at boundary {origin.seq} ({origin.at}{patched})"
        )
    for fork in summary.forks:
        lines.append(f"fork      {fork.run_id} from boundary {fork.seq} ({fork.at})")
    if summary.last_attempt is not None:
        lines.append(f"status    {_end_text(summary.last_attempt)}")
    if summary.goal:
        lines.append(f"goal      {summary.goal}")
    counts = ", ".join(f"{n} {status}" for status, n in summary.task_counts.items())
    lines.append(f"tasks     {len(summary.tasks)}: {counts or 'none'}")
    width = max((len(task.status) for task in summary.tasks), default=0)
    lines += [
        f"  {task.status.ljust(width)}  {task.id}  {task.title}"
        + (f"  ({task.assignee})" if task.assignee else "")
        for task in summary.tasks
    ]
    lines.append("attempts")
    if summary.attempts is None:
        lines.append("  (no attempt log: the run was not started by `oma run` or the runner)")
    lines += [f"  {_attempt_line(record)}" for record in summary.attempts or []]
    if summary.in_flight:
        lines.append("in flight")
    for task in summary.in_flight:
        lines.append(
            f"  task {task.task_id} ({task.assignee}, {task.phase}, turn {task.turns}): "
            f"{task.committed_tool_calls} of {len(task.tool_calls)} tool calls committed"
        )
        lines += [f"    {c.id}  {c.tool}  {_STATE_TEXT[c.state]}" for c in task.tool_calls]
        if task.earlier_tool_calls:
            lines.append(
                f"    earlier turns: {len(task.earlier_tool_calls)} tool calls done "
                f"({_tally(task.earlier_tool_calls)}): in the conversation, never run again"
            )
    if summary.approvals:
        lines.append("approvals")
    for approval in summary.approvals:
        by = f" by {approval.reviewer}" if approval.reviewer else ""
        lines.append(f"  {approval.request_id}  {approval.scope}  {approval.state}{by}")
    if summary.shared_memory_entries is not None:
        lines.append(f"memory    {summary.shared_memory_entries} shared-memory entries")
    return lines


def _attempt_line(record: AttemptRecord) -> str:
    done = f"{record.completed_tasks}/{record.total_tasks} tasks done"
    if record.attempt == 1:
        how = "first attempt"
    else:
        how = (
            f"resumed with {done}, {record.in_flight_tasks} in flight, "
            f"{record.committed_tool_calls} committed tool calls"
        )
    line = f"#{record.attempt}  {record.started_at}  on {record.host}: {how}"
    if record.outcome is None:
        return f"{line}; no end recorded"
    calls = (
        f" ({record.executed_tool_calls} tool calls executed, "
        f"{record.replayed_tool_calls} replayed)"
        if record.executed_tool_calls is not None
        else ""
    )
    return f"{line}; ended {record.ended_at}: {_outcome(record.outcome, record.message)}{calls}"


def _end_text(end: RunEndLine) -> str:
    if end.outcome is None:
        return (
            f"attempt {end.attempt} has no recorded end: it was killed outright, "
            "or it is still running"
        )
    return f"{_outcome(end.outcome, end.message)}  (attempt {end.attempt}, ended {end.ended_at})"


_OUTCOME_TEXT = {
    "ok": "succeeded",
    "cancelled": "drained (stopped at a durable boundary on a signal; resumable)",
    "fenced": "fenced (a newer attempt took the run over)",
}


def _outcome(outcome: str, message: str | None) -> str:
    text = _OUTCOME_TEXT.get(outcome, outcome)
    return f"{text}: {message}" if message else text


def _tally(tools: list[str]) -> str:
    """``note x8, search x4``: each tool once, in order of first use, with its count."""
    counts: dict[str, int] = {}
    for tool in tools:
        counts[tool] = counts.get(tool, 0) + 1
    return ", ".join(f"{tool} x{n}" for tool, n in counts.items())
