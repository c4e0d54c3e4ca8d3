"""A run's event journal, opened and closed around each run method (``run_tasks``,
``run_team``, ``run_from_plan``, ``restore``): ``run/start`` first, ``plan/set`` once the plan
exists, ``run/end`` last with the run's status, then every event appended before the method
returns."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from pydantic import ValidationError

from oma.agent.state import RunnerState
from oma.checkpoint.runner_state import InFlightTask
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV5
from oma.checkpoint.tail_replay import fold_journal_tail, tail_read_from
from oma.journal.recorder import JournalRecorder, RunJournal
from oma.orchestrator.context import RunContext
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.results import TeamRunResult

_OPEN: ContextVar[list[RunContext] | None] = ContextVar("oma_open_journals", default=None)


async def open_journal(
    context: RunContext,
    journal: RunJournal | None,
    *,
    enforce_lineage: bool = False,
    snapshot: object = None,
    known: list[dict[str, Any]] | None = None,
) -> None:
    """Give ``context`` a recorder numbering on from the journal and ``snapshot``'s watermark
    (a restore's); its events are appended by the run method's end at the latest."""
    if journal is None:
        return

    def failed(error: Exception) -> None:
        data = {"kind": "journal_append_failed", "error": error}
        context.emit(OrchestratorEvent("error", data=data))

    floor = snapshot.journal_watermark_seq if isinstance(snapshot, CheckpointSnapshotV5) else 0
    try:
        context.recorder = await JournalRecorder.open(
            journal,
            run_id=context.identity.run_id,
            attempt=context.identity.attempt,
            floor=floor,
            trace_id=context.identity.trace_id,
            on_error=failed,
            known=known,
        )
    except Exception as exc:
        # Numbering on from a journal that cannot be read could repeat its numbers: this
        # attempt writes none (its saves are v4), and says why.
        message = (
            f"the run journal cannot be read ({type(exc).__name__}: {exc}); this attempt keeps "
            "no journal and saves checkpoint v4"
        )
        data = {"kind": "journal_unreadable", "error": exc, "message": message}
        context.emit(OrchestratorEvent("error", data=data))
        return
    context.enforce_lineage = enforce_lineage
    opened = _OPEN.get()
    if opened is not None and context not in opened:
        opened.append(context)


@dataclass(frozen=True)
class FoldedTail:
    """The snapshot to resume (folded or as it was), and the journal's events above the
    stalest mark as read for the fold (None: not read), which number the next events too."""

    snapshot: CheckpointSnapshot
    events: list[dict[str, Any]] | None = None


async def fold_tail(
    snapshot: CheckpointSnapshot,
    journal: RunJournal | None,
    emit: Callable[[OrchestratorEvent], None],
) -> FoldedTail:
    """A v5 snapshot with what its run's journal holds past its marks folded into its in-flight
    tasks (``oma.checkpoint.tail_replay``); any other snapshot as it is. A tail the fold cannot
    place is discarded (a ``JOURNAL_TAIL_DISCARDED`` warning): the run resumes from the
    snapshot alone."""
    if journal is None or not isinstance(snapshot, CheckpointSnapshotV5):
        return FoldedTail(snapshot)
    entries = snapshot.in_flight_tasks
    if not entries:
        return FoldedTail(snapshot)
    watermark = snapshot.journal_watermark_seq
    run_id = snapshot.identity.run_id
    start = tail_read_from(entries, watermark)
    try:
        events = await journal.read_from(start, run_id=run_id)
    except Exception as exc:
        reason = f"the journal could not be read ({type(exc).__name__}: {exc})"
        emit(_discarded(reason))
        return FoldedTail(snapshot)
    # Every event above the watermark, when the read started at or below it: the numbering
    # goes on from them without reading the journal again.
    read = events if start <= watermark + 1 else None
    if not events:
        return FoldedTail(snapshot, read)
    fold = fold_journal_tail(entries, events, watermark, attempt=snapshot.identity.attempt)
    problem = fold.discard_reason or _unloadable(fold.tasks)
    if problem is not None:
        emit(_discarded(problem))
        return FoldedTail(snapshot, read)
    if not fold.folded_events:
        return FoldedTail(snapshot, read)
    # A call the fold committed used up the approval it waited on: as the runner's commit
    # does, the request is no longer pending.
    used = _asked(entries) - _asked(fold.tasks)
    pending = [r for r in snapshot.pending_approvals if r.id not in used]
    update = {"in_flight_tasks": fold.tasks, "pending_approvals": pending}
    return FoldedTail(snapshot.model_copy(update=update), read)


def _asked(tasks: list[InFlightTask]) -> set[str]:
    """The approval requests tool calls not yet committed wait on."""
    return {
        call.approval_request.id
        for task in tasks
        for call in task.pending_tool_calls or []
        if call.approval_request is not None and call.commit is None
    }


def _unloadable(tasks: list[InFlightTask]) -> str | None:
    """Why a folded task's runner state would not load (its messages are the runner's own
    types, which the snapshot's model leaves free-form), or None."""
    for task in tasks:
        try:
            RunnerState.from_checkpoint(task)
        except (ValidationError, ValueError, TypeError) as exc:
            return f"task {task.task_id}: the folded state does not load ({exc})"
    return None


def _discarded(reason: str) -> OrchestratorEvent:
    message = f"the run journal's tail was not folded into the restore: {reason}"
    data = {"code": "JOURNAL_TAIL_DISCARDED", "kind": "journal_tail_discarded"}
    return OrchestratorEvent("warning", data={**data, "reason": reason, "message": message})


def run_started(context: RunContext, mode: str) -> None:
    payload: dict[str, Any] = {"mode": mode}
    if context.goal is not None and mode != "restore":
        payload["goal"] = context.goal
    if context.metadata is not None:
        payload["metadata"] = context.metadata
    context.journal("run/start", payload)


def plan_set(context: RunContext) -> None:
    """The plan as it starts (revision 0)."""
    tasks = []
    for task in context.queue.tasks:
        item: dict[str, Any] = {"taskId": task.id, "description": task.description}
        if task.assignee is not None:
            item["assignee"] = task.assignee
        if task.depends_on:
            item["dependsOn"] = list(task.depends_on)
        tasks.append(item)
    context.journal("plan/set", {"revision": 0, "source": "initial", "tasks": tasks})


S = TypeVar("S")
P = ParamSpec("P")


def journaled(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, TeamRunResult]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, TeamRunResult]]:
    """A run method whose journals end with ``run/end`` and are appended before it returns
    (or raises)."""

    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> TeamRunResult:
        opened: list[RunContext] = []
        token = _OPEN.set(opened)
        try:
            result = await method(self, *args, **kwargs)
        except BaseException as exc:
            code = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
            await _close(opened, {"code": code, "message": f"{type(exc).__name__}: {exc}"})
            raise
        finally:
            _OPEN.reset(token)
        await _close(opened, result.status.to_data())
        return result

    functools.update_wrapper(wrapper, method)
    return wrapper


async def _close(opened: list[RunContext], status: dict[str, Any]) -> None:
    for context in opened:
        context.journal("run/end", {"status": status})
        if context.recorder is not None:
            await context.recorder.close()
