"""Everything one run (or one restored attempt) works with.

How it becomes a snapshot is ``snapshot_build``; how that is saved, ``saver`` (behind
``CheckpointWriter``, so this module imports neither).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from oma.agent.result import AgentRunResult, RunIdentity
from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.budget.account import BudgetAccount
from oma.budget.state import BudgetState
from oma.checkpoint.runner_state import InFlightTask
from oma.checkpoint.snapshot import RunMode
from oma.journal.recorder import JournalRecorder
from oma.orchestrator.events import OrchestratorEvent, ProgressCallback
from oma.orchestrator.gate_config import Gates
from oma.orchestrator.snapshot_wire import SnapshotEncoder
from oma.tasks.queue import TaskQueue
from oma.team import Team


class FatalRunError(Exception):
    """Raised inside a task when the whole run must stop (not retried, not a task failure)."""


@dataclass(frozen=True)
class Stop:
    """Why the run stops admitting work: suspended, rejected, or a gate callback failed.

    Running tasks drain first; then, if ``skip_reason`` is set, every unfinished task is skipped.
    """

    code: Literal["suspended", "rejected", "error", "cancelled"]
    message: str
    skip_reason: str | None = None


class CheckpointWriter(Protocol):
    """Where a run's boundaries are saved (``saver.ActiveCheckpoint``)."""

    async def save(self, context: RunContext, *, strict: bool = False) -> bool: ...

    async def confirm_current(self) -> None: ...


@dataclass
class RunContext:
    team: Team
    queue: TaskQueue
    identity: RunIdentity
    mode: RunMode
    emit_event: ProgressCallback | None
    checkpoint: CheckpointWriter | None = None
    goal: str | None = None
    metadata: dict[str, Any] | None = None
    max_concurrency: int = 5
    in_flight: dict[str, InFlightTask] = field(default_factory=dict)
    resume_states: dict[str, InFlightTask] = field(default_factory=dict)
    results: dict[str, AgentRunResult] = field(default_factory=dict)  # by task id
    pending_approvals: list[ApprovalRequest] = field(default_factory=list)
    approval_decisions: list[ApprovalDecisionRecord] = field(default_factory=list)
    gates: Gates | None = None
    ledger: DurableApprovalLedger | None = None
    stop: Stop | None = None
    approved_dispatch: dict[str, ApprovalRequest] = field(default_factory=dict)
    drain: asyncio.Event | None = None  # set (e.g. on SIGTERM): stop at the next boundary
    park_on_model_outage: bool = False  # a provider outage ends the attempt, not the task
    budget: BudgetAccount | None = None  # the run's limits and spend, when it has a budget
    kept_budget: BudgetState | None = None  # a saved budget this engine was given none for
    encoder: SnapshotEncoder = field(default_factory=SnapshotEncoder, repr=False, compare=False)
    recorder: JournalRecorder | None = None  # the run's event journal, when it keeps one
    enforce_lineage: bool = False  # a request showing a block no event explains is refused

    def drain_requested(self) -> bool:
        return self.drain is not None and self.drain.is_set()

    def all_pending_approvals(self) -> list[ApprovalRequest]:
        """Gate requests plus tool-call requests still waiting in in-flight state."""
        found = {request.id: request for request in self.pending_approvals}
        for state in self.durable_in_flight():
            for call in state.pending_tool_calls or []:
                request = call.approval_request
                if request is not None and call.commit is None and request.id not in found:
                    found[request.id] = request
        return list(found.values())

    def emit(self, event: OrchestratorEvent) -> None:
        if self.recorder is not None:
            self._journal_progress(event)
        if self.emit_event is not None:
            self.emit_event(event)

    def journal(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        task: str | None = None,
        agent: str | None = None,
    ) -> None:
        """Record a run event, when the run keeps a journal."""
        if self.recorder is not None:
            self.recorder.emit(kind, payload, task=task, agent=agent)

    def _journal_progress(self, event: OrchestratorEvent) -> None:
        """The progress events that are also run events."""
        if event.type == "task_start":
            self.journal(
                "task/status", {"status": "in_progress"}, task=event.task, agent=event.agent
            )
        elif event.type == "task_skipped":
            task = event.data.get("task")
            reason = getattr(task, "result", None)
            payload: dict[str, Any] = {"status": "skipped"}
            if isinstance(reason, str) and reason:
                payload["reason"] = reason
            self.journal("task/status", payload, task=event.task, agent=event.agent)
        elif event.type == "approval_pending":
            request = event.data.get("request")
            if isinstance(request, ApprovalRequest):
                payload = {"request": request.to_data()}
                self.journal("approval/request", payload, task=event.task, agent=event.agent)

    def result_for(self, task_id: str) -> AgentRunResult | None:
        return self.results.get(task_id)

    def _in_progress(self, task_id: str) -> bool:
        task = self.queue.find(task_id)
        return task is not None and task.status == "in_progress"

    def waiting_resumes(self) -> dict[str, InFlightTask]:
        """Restored runner states whose task has not been dispatched again yet."""
        found = {}
        for task_id, state in self.resume_states.items():
            task = self.queue.find(task_id)
            if task is not None and task.status == "pending":
                found[task_id] = state
        return found

    def durable_in_flight(self) -> list[InFlightTask]:
        """Running tasks' states, and restored ones still waiting to run: a save made before a
        resumed task re-enters its runner (the fencing claim, another task's boundary) must
        keep its committed tool results, or a kill right then would lose them."""
        running = [state for task_id, state in self.in_flight.items() if self._in_progress(task_id)]
        return running + list(self.waiting_resumes().values())
