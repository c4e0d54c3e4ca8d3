"""A run's event journal, opened and closed around each run method (``run_tasks``,
``run_team``, ``run_from_plan``, ``restore``): ``run/start`` first, ``plan/set`` once the plan
exists, ``run/end`` last with the run's status, then every event appended before the method
returns."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, TypeVar

from oma.checkpoint.snapshot import CheckpointSnapshotV5
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
) -> None:
    """Give ``context`` a recorder numbering on from the journal and ``snapshot``'s watermark
    (a restore's); its events are appended by the run method's end at the latest."""
    if journal is None:
        return

    def failed(error: Exception) -> None:
        data = {"kind": "journal_append_failed", "error": error}
        context.emit(OrchestratorEvent("error", data=data))

    floor = snapshot.journal_watermark_seq if isinstance(snapshot, CheckpointSnapshotV5) else 0
    context.recorder = await JournalRecorder.open(
        journal,
        run_id=context.identity.run_id,
        attempt=context.identity.attempt,
        floor=floor,
        trace_id=context.identity.trace_id,
        on_error=failed,
    )
    context.enforce_lineage = enforce_lineage
    opened = _OPEN.get()
    if opened is not None and context not in opened:
        opened.append(context)


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
