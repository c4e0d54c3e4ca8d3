"""Checkpoint snapshots, versions 1-5. New writes are v4; v1-v3 and v5 are read as they are.

| field                     | v1       | v2       | v3       | v4       | v5       |
|---------------------------|----------|----------|----------|----------|----------|
| top-level ``runId``       | optional | -        | -        | -        | -        |
| ``identity``              | -        | required | required | required | required |
| ``inFlightTasks``         | -        | -        | required | required | required |
| ``pendingApprovals``      | -        | -        | -        | required | required |
| ``approvalDecisions``     | -        | -        | -        | required | required |
| ``journalWatermarkSeq``   | -        | -        | -        | -        | required |
| ``journalRef``            | -        | -        | -        | -        | optional |

v5 is what the TypeScript reference writes when a run keeps a run journal (its
``docs/checkpoint.md``): v4 plus the journal's watermark. oma restores a v5 snapshot as the
v4 it contains (it has no reference journal to replay a tail from) and saves v4 from then on.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.budget.state import BudgetState
from oma.checkpoint.queue_snapshot import TaskQueueSnapshot
from oma.checkpoint.runner_state import InFlightTask
from oma.run_metadata import validate_run_metadata
from oma.wire import WireModel

RunMode = Literal["runTeam", "runTasks", "runFromPlan"]
SNAPSHOT_VERSIONS = (1, 2, 3, 4, 5)
CURRENT_SNAPSHOT_VERSION = 4


class SharedMemoryEntrySnapshot(WireModel):
    key: str
    value: str
    metadata: dict[str, Any] | None = None
    created_at: str
    expires_at_turn: int | None = None


class SharedMemorySnapshot(WireModel):
    """Shared memory in a snapshot: the turn counter and every live entry (left out when the
    memory lives in the checkpoint's own store)."""

    version: Literal[1]
    turn_count: Annotated[int, Field(ge=0)]
    entries: list[SharedMemoryEntrySnapshot]


class BusMessage(WireModel):
    id: str
    sender: str = Field(alias="from")
    to: str
    content: str
    timestamp: str


class BusReadState(WireModel):
    agent_name: str
    message_ids: list[str]


class MessageBusSnapshot(WireModel):
    """The message bus in a snapshot: every message, and which of them each agent has read."""

    version: Literal[1]
    messages: list[BusMessage]
    read_state: list[BusReadState]


class CompletedTaskCheckpoint(WireModel):
    """A finished task's result; ``agent_result`` is the JSON-safe ``AgentRunResult``."""

    task_id: str
    assignee: str | None = None
    result: str | None = None
    agent_result: dict[str, Any] | None = None


class RunIdentityCheckpoint(WireModel):
    """The run's identity in a snapshot (v2 on): run id, attempt number, and the trace and root
    span ids of the attempt that saved it, which the next attempt links to."""

    run_id: str
    attempt: Annotated[int, Field(ge=1)]
    last_trace_id: str
    last_root_span_id: str


class _SnapshotBase(WireModel):
    version: int
    mode: RunMode
    created_at: str
    metadata: dict[str, Any] | None = None
    goal: str | None = None
    queue: TaskQueueSnapshot
    shared_memory: SharedMemorySnapshot | None = None
    message_bus: MessageBusSnapshot | None = None
    turn_count: Annotated[int, Field(ge=0)] | None = None
    completed_task_results: list[CompletedTaskCheckpoint]

    def to_wire(self) -> dict[str, Any]:
        # Python mode, not JSON mode: pydantic's JSON mode turns a lone surrogate in an object
        # key ("\\ud800", which the reference writes) into U+FFFD, or raises UnicodeEncodeError
        # when the key is nested. Every value here is JSON data already, and jsonutil.dumps
        # writes such keys as escapes.
        return self.model_dump(mode="python", by_alias=True)

    @field_validator("metadata")
    @classmethod
    def _metadata_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                validate_run_metadata(value, allow_engine_keys=True)
            except ValueError as exc:
                raise ValueError(f"rule 2.6.1: {exc}") from exc
        return value


class CheckpointSnapshotV1(_SnapshotBase):
    """A snapshot of schema v1: the run's mode, queue and completed task results, with an optional
    top-level ``run_id``."""

    version: Literal[1]
    run_id: str | None = None


class CheckpointSnapshotV2(_SnapshotBase):
    """A snapshot of schema v2: v1 with the run's ``identity`` in place of the top-level run id."""

    version: Literal[2]
    identity: RunIdentityCheckpoint


class CheckpointSnapshotV3(_SnapshotBase):
    """A snapshot of schema v3: v2 plus the runner state of each task in progress."""

    version: Literal[3]
    identity: RunIdentityCheckpoint
    in_flight_tasks: list[InFlightTask]

    @model_validator(mode="after")
    def _in_flight_unique(self) -> CheckpointSnapshotV3:
        _check_in_flight_unique(self.in_flight_tasks)
        return self


class CheckpointSnapshotV4(_SnapshotBase):
    """A snapshot of schema v4, the one written now: v3 plus the run's pending approval requests
    and recorded decisions."""

    version: Literal[4]
    identity: RunIdentityCheckpoint
    in_flight_tasks: list[InFlightTask]
    pending_approvals: list[ApprovalRequest]
    approval_decisions: list[ApprovalDecisionRecord]
    budget: BudgetState | None = None  # oma's own (``oma.budget.state``), only with a budget

    @model_validator(mode="after")
    def _approvals_consistent(self) -> CheckpointSnapshotV4:
        _check_in_flight_unique(self.in_flight_tasks)
        run_id = self.identity.run_id
        pending_ids = [request.id for request in self.pending_approvals]
        decided_ids = [decision.request_id for decision in self.approval_decisions]
        if len(pending_ids) != len(set(pending_ids)):
            raise ValueError("rule 2.6.5: pendingApprovals ids are not unique")
        if len(decided_ids) != len(set(decided_ids)):
            raise ValueError("rule 2.6.5: approvalDecisions requestIds are not unique")
        foreign = [r.id for r in self.pending_approvals if r.run_id != run_id] + [
            d.request_id for d in self.approval_decisions if d.run_id != run_id
        ]
        if foreign:
            raise ValueError(f"rule 2.6.5: approvals {foreign} belong to a run other than {run_id}")
        for task in self.in_flight_tasks:
            for pending in task.pending_tool_calls or []:
                if pending.approval_request and pending.approval_request.id not in pending_ids:
                    raise ValueError(
                        f"rule 2.6.5: in-flight approvalRequest {pending.approval_request.id} "
                        "is not listed in pendingApprovals"
                    )
                decision = pending.approval_decision
                if decision and decision.request_id not in decided_ids:
                    raise ValueError(
                        f"rule 2.6.5: in-flight approvalDecision {decision.request_id} "
                        "is not listed in approvalDecisions"
                    )
        return self


class RunJournalRef(WireModel):
    """Where the reference's run kept its journal (``{kind, path?}``): informational, never
    resolved on restore."""

    kind: str
    path: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _path_not_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and "path" in data and data["path"] is None:
            raise ValueError("rule 2.6.1: journalRef.path is null (leave it out instead)")
        return data


class CheckpointSnapshotV5(CheckpointSnapshotV4):
    """A snapshot of schema v5, as the reference writes it for a run with a run journal: v4
    plus ``journalWatermarkSeq`` (every journal event at or below it is reflected here) and
    ``journalRef``. oma writes it for a run that keeps a journal (``oma.journal``)."""

    version: Literal[5]  # type: ignore[assignment]  # a v5 is a v4 with more, by design
    journal_watermark_seq: Annotated[int, Field(ge=0)]
    journal_ref: RunJournalRef | None = None

    @model_validator(mode="before")
    @classmethod
    def _ref_not_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and "journalRef" in data and data["journalRef"] is None:
            raise ValueError("rule 2.6.1: journalRef is null (leave it out instead)")
        return data


def _check_in_flight_unique(tasks: list[InFlightTask]) -> None:
    ids = [task.task_id for task in tasks]
    if len(ids) != len(set(ids)):
        raise ValueError("rule 2.6.3: inFlightTasks has duplicate taskIds")


CheckpointSnapshot = (
    CheckpointSnapshotV1
    | CheckpointSnapshotV2
    | CheckpointSnapshotV3
    | CheckpointSnapshotV4
    | CheckpointSnapshotV5
)
SNAPSHOT_MODELS: dict[int, type[_SnapshotBase]] = {
    1: CheckpointSnapshotV1,
    2: CheckpointSnapshotV2,
    3: CheckpointSnapshotV3,
    4: CheckpointSnapshotV4,
    5: CheckpointSnapshotV5,
}
