"""A suspension is reported only once it is durable: when the save that carries an approval
request fails, no approval row is written and no ``approval_pending`` event is emitted (a
reviewer must never decide a request the checkpoint does not hold); the run stops instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.approval import Suspend, get_approval_record
from oma.errors import StoreUnavailableError
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore
from tests.engine.approval_fixtures import (
    CHARGE_REQUEST,
    CHARGE_TASK,
    Recorder,
    charge_team,
    deploy_team,
)

PLAN = {
    "version": 1,
    "tasks": [
        {"id": CHARGE_TASK, "title": "Charge", "description": "Charge.", "assignee": "operator"}
    ],
}


class RequestLosingStore(FileStore):
    """A file store whose disk fails exactly when a checkpoint carries an approval request."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.refused = 0

    def _check(self, key: str, value: str) -> None:
        carries = '"approvalRequest"' in value or '"pendingApprovals":[{' in value
        if key.startswith("__oma_checkpoint__/") and carries:
            self.refused += 1
            raise StoreUnavailableError("disk full (injected)")

    async def set(self, key: str, value: str, metadata: dict[str, Any] | None = None) -> None:
        self._check(key, value)
        await super().set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        self._check(key, value)
        return await super().compare_and_set(key, expected, value, metadata)


@pytest.mark.parametrize("fence", [False, True])
async def test_a_tool_call_suspension_that_cannot_be_saved_is_not_reported(
    tmp_path: Path, fence: bool
) -> None:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    store = RequestLosingStore(tmp_path / "store.json")
    events: list[str] = []
    orchestrator = OpenMultiAgent(
        on_tool_call=recorder.gate(Suspend("Finance review")),
        on_progress=lambda e: events.append(e.type),
    )
    options = CheckpointOptions(store=store, run_id="lost", fence=fence)
    try:
        result = await orchestrator.run_from_plan(team, PLAN, checkpoint=options)
    except Exception:  # the save's failure may end the run by raising: that is safe too
        result = None
    assert store.refused >= 1  # the suspension save was tried, and failed
    assert await get_approval_record(store, CHARGE_REQUEST) is None  # no row for a reviewer
    assert "approval_pending" not in events
    assert recorder.tool_calls == []  # and the gated call did not run
    if result is not None:
        assert result.status.code != "suspended" and not result.pending_approvals


async def test_a_dispatch_suspension_that_cannot_be_saved_is_not_reported(tmp_path: Path) -> None:
    team, model = deploy_team()
    store = RequestLosingStore(tmp_path / "store.json")
    events: list[str] = []

    def dispatch(task: object) -> object:
        return Suspend("Change board review") if getattr(task, "title", "") == "Deploy" else True

    tasks: list[dict[str, Any]] = [
        {"title": "Build", "description": "Build it."},
        {"title": "Deploy", "description": "Deploy it.", "dependsOn": ["Build"]},
    ]
    orchestrator = OpenMultiAgent(
        on_task_dispatch=dispatch, on_progress=lambda e: events.append(e.type)
    )
    result = await orchestrator.run_tasks(
        team, tasks, checkpoint=CheckpointOptions(store=store, run_id="lost-d")
    )
    assert result.status.code == "error" and "could not be checkpointed" in str(
        result.status.message
    )
    assert [t.status for t in result.tasks] == ["completed", "skipped"]  # Deploy never ran
    assert store.refused == 1
    rows = [e.key for e in await store.list() if e.key.startswith("__oma_approval__/")]
    assert rows == [] and "approval_pending" not in events
    assert len(model.calls) == 1  # the Build task's one model call, nothing for Deploy
