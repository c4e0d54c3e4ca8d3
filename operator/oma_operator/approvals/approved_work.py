"""Approved work a run has not finished: what a retry would do on the strength of an earlier
decision (talks to the run's store only).

An approval binds the spec it was given under (``runs.retries``). Which approvals still stand for
work to come, from the run's latest checkpoint and the ledger:

- a tool call (or an uncertain one settled by ``retry``) until its call is committed;
- a task dispatch until the task has ended (completed, failed or skipped);
- a round until every task it let start has ended;
- a plan always: every task of the run follows it.

With no checkpoint, every approved request of the run stands: a restart asks the same requests
again (their ids come from their content) and finds them decided.
"""

from __future__ import annotations

from oma.approval.ledger import ApprovalRecord, DurableApprovalLedger
from oma.approval.models import TOOL_CALL_SCOPES
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.store.base import MemoryStore

ENDED = ("completed", "failed", "skipped")


async def approved_not_run(store: MemoryStore, run_id: str) -> list[ApprovalRecord]:
    """The run's approved requests whose work has not ended yet (see the module's rules); one
    read of its checkpoint and of the ledger rows it names."""
    ledger = DurableApprovalLedger(store)
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if not isinstance(snapshot, CheckpointSnapshotV4):
        return [r for r in await ledger.records(run_id) if _approved(r, run_id)]
    pending = {request.id for request in snapshot.pending_approvals}
    ended = {task.id for task in snapshot.queue.tasks if task.status in ENDED}
    ids = [*pending, *(decision.request_id for decision in snapshot.approval_decisions)]
    found = [await ledger.get(request_id) for request_id in dict.fromkeys(ids)]
    return [
        record
        for record in found
        if record is not None
        and _approved(record, run_id)
        and not _spent(record, record.request.id in pending, ended)
    ]


def _approved(record: ApprovalRecord, run_id: str) -> bool:
    decision = record.decision
    return (
        record.request.run_id == run_id
        and decision is not None
        and decision.decision == ("approved")
    )


def _spent(record: ApprovalRecord, pending: bool, ended: set[str]) -> bool:
    """Whether the work the approval let happen is over (nothing of it runs again)."""
    request = record.request
    if request.scope in TOOL_CALL_SCOPES:
        return not pending  # the call is committed
    if request.scope == "task_dispatch":
        return not pending and request.boundary in ended
    if request.scope == "task_round":
        started = request.content.get("nextTasks") or []
        ids = [task.get("id") for task in started if isinstance(task, dict)]
        return not pending and all(task_id in ended for task_id in ids)
    return False  # a plan: the whole run follows it
