"""The task: what an agent is asked to do, its dependencies, status and result."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from oma.checkpoint.queue_snapshot import TaskSnapshot, TaskStatus
from oma.task_metadata import check_task_metadata
from oma.timeutil import now_iso

TERMINAL_STATUSES: frozenset[TaskStatus] = frozenset({"completed", "failed", "skipped"})
MemoryScope = Literal["dependencies", "all"]
DependencyPayload = Literal["output", "structured", "both"]


@dataclass
class Task:
    """A unit of work in a run's queue: what to do, who does it, what it depends on, how it
    is retried, and its status and result."""

    title: str
    description: str
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    status: TaskStatus = "pending"
    assignee: str | None = None
    depends_on: list[str] = field(default_factory=list)
    memory_scope: MemoryScope | None = None
    dependency_payload: DependencyPayload | None = None
    role: str | None = None
    priority: str | None = None
    metadata: dict[str, Any] | None = None
    requires: dict[str, Any] | None = None
    result: str | None = None
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    max_retries: int | None = None
    retry_delay_ms: float | None = None
    retry_backoff: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # fields a newer writer added

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def touch(self) -> None:
        self.updated_at = now_iso()

    def to_snapshot(self) -> TaskSnapshot:
        return TaskSnapshot.model_validate(self.to_wire())

    def to_wire(self) -> dict[str, Any]:
        """The reference's JSON shape and field order (optional fields omitted when unset)."""
        wire: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "description": self.description,
            "status": self.status,
        }
        optional: list[tuple[str, Any]] = [
            ("assignee", self.assignee),
            ("dependsOn", list(self.depends_on) if self.depends_on else None),
            ("memoryScope", self.memory_scope),
            ("dependencyPayload", self.dependency_payload),
            ("role", self.role),
            ("priority", self.priority),
            ("metadata", self.metadata),
            ("requires", self.requires),
            ("result", self.result),
        ]
        wire.update((key, value) for key, value in optional if value is not None)
        wire["createdAt"] = self.created_at
        wire["updatedAt"] = self.updated_at
        retry: list[tuple[str, Any]] = [
            ("maxRetries", self.max_retries),
            ("retryDelayMs", self.retry_delay_ms),
            ("retryBackoff", self.retry_backoff),
        ]
        wire.update((key, value) for key, value in retry if value is not None)
        wire.update(self.extra)
        return wire

    @classmethod
    def from_snapshot(cls, snapshot: TaskSnapshot) -> Task:
        return cls(
            id=snapshot.id,
            title=snapshot.title,
            description=snapshot.description,
            status=snapshot.status,
            assignee=snapshot.assignee,
            depends_on=list(snapshot.depends_on or []),
            memory_scope=snapshot.memory_scope,
            dependency_payload=snapshot.dependency_payload,
            role=snapshot.role,
            priority=snapshot.priority,
            # Re-validated when restored (reference 3.1): a forged checkpoint is refused here.
            metadata=(
                check_task_metadata(snapshot.metadata) if snapshot.metadata is not None else None
            ),
            requires=snapshot.requires,
            result=snapshot.result,
            created_at=snapshot.created_at,
            updated_at=snapshot.updated_at,
            max_retries=snapshot.max_retries,
            retry_delay_ms=snapshot.retry_delay_ms,
            retry_backoff=snapshot.retry_backoff,
            extra=_carried(snapshot),
        )


def _carried(snapshot: TaskSnapshot) -> dict[str, Any]:
    """What a task keeps only to write it back: the plan-revision markers of a v2 queue (read,
    never produced here) and fields this version does not know, as they were read (pydantic
    keeps those apart from the declared ones: no dump of the whole task to find them)."""
    carried: dict[str, Any] = {}
    if snapshot.superseded_by_revision is not None:
        carried["supersededByRevision"] = snapshot.superseded_by_revision
    if snapshot.recovered_by_revision is not None:
        carried["recoveredByRevision"] = snapshot.recovered_by_revision
    carried.update(snapshot.model_extra or {})
    return carried
