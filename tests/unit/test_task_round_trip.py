"""A restored task writes back every field it was read with: the plan-revision markers of a
v2 queue (which this version reads but never makes) and fields a newer writer added."""

from __future__ import annotations

from typing import Any

from oma.checkpoint.queue_snapshot import TaskSnapshot
from oma.tasks.task import Task


def test_revision_markers_and_unknown_fields_survive_a_restore() -> None:
    wire: dict[str, Any] = {
        "id": "t1",
        "title": "T",
        "description": "d",
        "status": "pending",
        "assignee": "w",
        "createdAt": "2026-12-01T00:00:00.000Z",
        "updatedAt": "2026-12-01T00:00:00.000Z",
        "supersededByRevision": 2,
        "recoveredByRevision": 3,
        "futureField": {"kept": [1, None]},
    }
    task = Task.from_snapshot(TaskSnapshot.model_validate(wire))
    assert task.to_wire() == wire
