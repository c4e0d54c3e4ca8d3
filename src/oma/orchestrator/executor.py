"""Executing the queue: event-driven (a task starts once its dependencies complete) or, with an
``on_approval`` gate, in rounds with the gate called between them.

Both stop admitting work when a gate suspends or rejects, let running tasks drain, and then
skip what is left if the stop says so. A suspended run is saved once more after draining.
"""

from __future__ import annotations

import asyncio

from oma.approval.errors import DurableApprovalError
from oma.approval.gates import Allow, Deny, ask_gate
from oma.approval.models import ApprovalRequest
from oma.orchestrator.context import RunContext, Stop
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.gating import (
    ENDS_THE_ATTEMPT,
    callback_failure,
    dispatch_request,
    persist_pending_approval,
    round_request,
)
from oma.orchestrator.saver import save_run
from oma.orchestrator.task_runner import run_task
from oma.tasks.task import Task

DISPATCH_SUSPENDED = "Task dispatch approval pending."


async def execute_queue(context: RunContext) -> None:
    if context.gates is not None and context.gates.on_approval is not None:
        await _execute_rounds(context)
    else:
        await _execute_events(context)
    await _finish(context)


async def _execute_events(context: RunContext) -> None:
    running: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for task in _ready(context):
                _stop_if_draining(context)
                if context.stop is not None or len(running) >= context.max_concurrency:
                    break
                _assign(context, task, running)
                if not await _may_dispatch(context, task):
                    break
                running[task.id] = _start(context, task)
            if not running:
                break
            done, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
            for task_id in [tid for tid, job in running.items() if job in done]:
                running.pop(task_id).result()  # a fatal error stops the whole run here
    finally:
        await _cancel(running)


async def _execute_rounds(context: RunContext) -> None:
    gate = context.gates.on_approval if context.gates else None
    while context.stop is None:
        _stop_if_draining(context)
        if context.stop is not None:
            return
        batch = _ready(context)
        if not batch:
            return
        running: dict[str, asyncio.Task[None]] = {}
        try:
            for task in batch:
                _assign(context, task, running)
                running[task.id] = _start(context, task)
            await asyncio.gather(*running.values())
        finally:
            await _cancel(running)
        completed = [task for task in batch if task.status == "completed"]
        upcoming = _ready(context)
        if context.stop is None and gate is not None and completed and upcoming:
            await _round_gate(context, completed, upcoming)


async def _round_gate(context: RunContext, completed: list[Task], upcoming: list[Task]) -> None:
    assert context.gates is not None and context.gates.on_approval is not None
    try:
        outcome = await ask_gate(context.gates.on_approval, completed, upcoming)
        if isinstance(outcome, Allow):
            return
        if isinstance(outcome, Deny):
            context.stop = Stop(
                "rejected", "Round approval rejected.", "Skipped: approval rejected."
            )
            return
        request = round_request(context.identity.run_id, completed, upcoming, outcome.reason)
    except Exception as exc:  # a failing gate: no pending request
        failure: Exception | None = exc
    else:
        failure = await _persist(context, request)
    if failure is None:
        context.stop = Stop("suspended", "Round approval pending.")
        return
    context.stop = Stop(
        "error",
        f"Approval callback failed: {failure}",
        f"Skipped: approval callback error — {failure}",
    )


async def _may_dispatch(context: RunContext, task: Task) -> bool:
    approved = context.approved_dispatch.pop(task.id, None)
    if approved is not None:  # reviewed before a restore: consumed once, gate not asked again
        candidate = dispatch_request(context.identity.run_id, task)
        if (candidate.id, candidate.request_hash) != (approved.id, approved.request_hash):
            raise DurableApprovalError(
                "APPROVAL_STALE_DECISION",
                f"Task {task.id} changed since its dispatch was approved.",
            )
        context.pending_approvals = [r for r in context.pending_approvals if r.id != approved.id]
        return True
    gate = context.gates.on_task_dispatch if context.gates else None
    if gate is None:
        return True
    try:
        outcome = await ask_gate(gate, task)
        if isinstance(outcome, Allow):
            return True
        if isinstance(outcome, Deny):
            context.stop = Stop(
                "rejected",
                "Task dispatch approval rejected.",
                "Skipped: task dispatch approval rejected.",
            )
            return False
        request = dispatch_request(context.identity.run_id, task, outcome.reason)
    except Exception as exc:  # a failing gate: no pending request
        failure: Exception | None = exc
    else:
        failure = await _persist(context, request)
    if failure is None:
        context.stop = Stop("suspended", DISPATCH_SUSPENDED)
    else:
        context.stop = callback_failure("Task dispatch", failure)
    return False


async def _persist(context: RunContext, request: ApprovalRequest) -> Exception | None:
    """Save a gate's suspension; the failure, if any, that makes it the gate's error (as in the
    reference: APPROVAL_INTEGRITY_ERROR, no pending request). A failure of the store or of the
    attempt (``ENDS_THE_ATTEMPT``: fenced, lost, a store error) is not the gate's: it
    propagates and ends the attempt with its own exit code. (A gate callback that raises such
    an error itself is still a callback error.)"""
    try:
        await persist_pending_approval(context, request)
    except ENDS_THE_ATTEMPT:
        raise
    except Exception as exc:
        return exc
    return None


DRAINED = "Stopped at a durable boundary (drain requested); resume continues from there."


def _stop_if_draining(context: RunContext) -> None:
    if context.stop is None and context.drain_requested():
        context.stop = Stop("cancelled", DRAINED)


def _ready(context: RunContext) -> list[Task]:
    """Pending tasks, an approved dispatch first; an approved task that is not ready is stale."""
    pending = context.queue.by_status("pending")
    for task_id in context.approved_dispatch:
        task = context.queue.find(task_id)
        if task is None or task.status != "pending":
            raise DurableApprovalError(
                "APPROVAL_STALE_DECISION",
                f"Task {task_id} was approved for dispatch but is not ready to run.",
            )
    return sorted(pending, key=lambda task: task.id not in context.approved_dispatch)


def _start(context: RunContext, task: Task) -> asyncio.Task[None]:
    context.queue.start(task.id)
    context.emit(OrchestratorEvent("task_start", task.assignee, task.id, {"task": task}))
    context.emit(OrchestratorEvent("agent_start", task.assignee, task.id))
    return asyncio.create_task(run_task(context, task))


def _assign(context: RunContext, task: Task, running: dict[str, asyncio.Task[None]]) -> None:
    roster = context.team.roster
    if task.assignee in roster:
        return
    load = {name: 0 for name in roster}
    for task_id in running:
        assignee = context.queue.get(task_id).assignee
        if assignee in load:
            load[assignee] += 1
    task.assignee = min(roster, key=lambda name: (load[name], roster.index(name)))


async def _cancel(running: dict[str, asyncio.Task[None]]) -> None:
    for job in running.values():
        job.cancel()
    await asyncio.gather(*running.values(), return_exceptions=True)


async def _finish(context: RunContext) -> None:
    stop = context.stop
    if stop is not None and stop.skip_reason is not None:
        for task in context.queue.skip_remaining(stop.skip_reason):
            context.emit(OrchestratorEvent("task_skipped", task.assignee, task.id, {"task": task}))
        return  # drain-then-skip is not saved: the checkpoint keeps the last good state
    if not all(task.status == "completed" for task in context.queue.tasks):
        _stop_if_draining(context)  # a drain that arrived while the last tasks were running
    stop = context.stop
    if stop is not None and stop.code == "suspended":
        await save_run(context, strict=True)
    elif stop is not None and stop.code == "cancelled":
        await save_run(context)  # flush: the next attempt starts from here
    elif all(task.status == "completed" for task in context.queue.tasks):
        await save_run(context)
