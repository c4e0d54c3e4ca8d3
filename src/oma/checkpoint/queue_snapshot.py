"""Task and task-queue snapshots (queue v1, and v2 which adds accepted plan revisions)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from oma.wire import WireModel

TaskStatus = Literal["pending", "in_progress", "completed", "failed", "blocked", "skipped"]
NonNegativeNumber = Annotated[int | float, Field(ge=0)]


class TaskSnapshot(WireModel):
    """One task as the queue persists it (``verify`` is live config and never persisted)."""

    id: str
    title: str
    description: str
    status: TaskStatus
    assignee: str | None = None
    depends_on: list[str] | None = None
    memory_scope: Literal["dependencies", "all"] | None = None
    dependency_payload: Literal["output", "structured", "both"] | None = None
    role: str | None = None
    priority: Literal["low", "normal", "high", "critical"] | None = None
    metadata: dict[str, Any] | None = None  # checked when restored (oma.tasks.task)
    requires: dict[str, Any] | None = None
    result: str | None = None
    created_at: str
    updated_at: str
    max_retries: Annotated[int, Field(ge=0)] | None = None
    retry_delay_ms: NonNegativeNumber | None = None
    retry_backoff: NonNegativeNumber | None = None
    superseded_by_revision: int | None = None
    recovered_by_revision: int | None = None


class RetargetedTask(WireModel):
    task_id: str
    assignee: str


class PlanRevision(WireModel):
    """A plan revision accepted at run time (queue v2): what triggered it, and the tasks it added,
    retargeted and superseded."""

    id: str
    version: Annotated[int, Field(ge=1)]
    trigger_task_id: str
    trigger: Literal["success", "failure", "verification_rejected"]
    reason: str
    added_tasks: dict[str, str]
    retargeted_tasks: list[RetargetedTask]
    superseded_task_ids: list[str]
    created_at: str


class TaskQueueSnapshotV1(WireModel):
    """The task queue in a snapshot (queue v1): every task, and the task ids in each status."""

    version: Literal[1]
    tasks: list[TaskSnapshot]
    pending: list[str] = Field(default_factory=list)
    in_progress: list[str] = Field(default_factory=list)
    completed: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    blocked: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _task_ids_unique(self) -> TaskQueueSnapshotV1:
        ids = [task.id for task in self.tasks]
        if len(ids) != len(set(ids)):
            raise ValueError("rule 2.6.6: queue task ids are not unique")
        return self


class TaskQueueSnapshotV2(TaskQueueSnapshotV1):
    """The queue after a runtime plan revision was accepted (the reference writes it; oma keeps
    the revisions of a queue it restored from one and writes them back, but makes none)."""

    version: Literal[2]  # type: ignore[assignment]
    plan_revision: Annotated[int, Field(ge=1)]
    plan_revisions: list[PlanRevision]

    @model_validator(mode="after")
    def _revisions_consistent(self) -> TaskQueueSnapshotV2:
        if len(self.plan_revisions) != self.plan_revision:
            raise ValueError(
                f"rule 2.6.6: planRevision is {self.plan_revision} but "
                f"{len(self.plan_revisions)} planRevisions are recorded"
            )
        known = {task.id for task in self.tasks}
        for index, revision in enumerate(self.plan_revisions, start=1):
            if revision.version != index:
                raise ValueError(
                    f"rule 2.6.6: plan revision {index} has version {revision.version}"
                )
            referenced = [
                revision.trigger_task_id,
                *revision.added_tasks.values(),
                *(item.task_id for item in revision.retargeted_tasks),
                *revision.superseded_task_ids,
            ]
            missing = [task_id for task_id in referenced if task_id not in known]
            if missing:
                raise ValueError(f"rule 2.6.6: plan revision {index} references unknown {missing}")
        return self


TaskQueueSnapshot = Annotated[
    TaskQueueSnapshotV1 | TaskQueueSnapshotV2, Field(discriminator="version")
]
