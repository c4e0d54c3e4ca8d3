"""A suspension is reported only once it is durable: when the save that carries an approval
request fails, no approval row is written and no ``approval_pending`` event is emitted (a
reviewer must never decide a request the checkpoint does not hold); the run stops instead.

How it stops depends on the failure: a store that failed ends the attempt with the store's
error (``StoreUnavailableError`` is transient: the attempt is retried); any other failure of
the save is the request's (``APPROVAL_INTEGRITY_ERROR``: a dispatch gate's error). See also
``test_attempt_ending_suspension_saves``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from oma.approval import Suspend, get_approval_record
from oma.errors import StoreUnavailableError
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, TeamRunResult
from oma.pod_contract import Exit, exit_for_error
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
    """A file store whose disk fails exactly when a checkpoint carries an approval request
    (``fails`` makes the error: by default the store's own, unreachable)."""

    def __init__(
        self,
        path: Path,
        fails: Callable[[], Exception] = lambda: StoreUnavailableError("disk full (injected)"),
    ) -> None:
        super().__init__(path)
        self.fails = fails
        self.refused = 0

    def _check(self, key: str, value: str) -> None:
        carries = '"approvalRequest"' in value or '"pendingApprovals":[{' in value
        if key.startswith("__oma_checkpoint__/") and carries:
            self.refused += 1
            raise self.fails()

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
    # The store failed, not the task: the attempt ends (transient), the task is not failed.
    with pytest.raises(StoreUnavailableError):
        await orchestrator.run_from_plan(team, PLAN, checkpoint=options)
    assert store.refused == 1  # the suspension save was tried once, and failed
    assert await get_approval_record(store, CHARGE_REQUEST) is None  # no row for a reviewer
    assert "approval_pending" not in events
    assert recorder.tool_calls == []  # and the gated call did not run


def _dispatch_run(
    store: RequestLosingStore, events: list[str]
) -> tuple[Awaitable[TeamRunResult], Any]:
    team, model = deploy_team()

    def dispatch(task: object) -> object:
        return Suspend("Change board review") if getattr(task, "title", "") == "Deploy" else True

    tasks: list[dict[str, Any]] = [
        {"title": "Build", "description": "Build it."},
        {"title": "Deploy", "description": "Deploy it.", "dependsOn": ["Build"]},
    ]
    orchestrator = OpenMultiAgent(
        on_task_dispatch=dispatch, on_progress=lambda e: events.append(e.type)
    )
    run = orchestrator.run_tasks(
        team, tasks, checkpoint=CheckpointOptions(store=store, run_id="lost-d")
    )
    return run, model


async def test_a_dispatch_suspension_the_store_cannot_save_ends_the_attempt(
    tmp_path: Path,
) -> None:
    store = RequestLosingStore(tmp_path / "store.json")
    events: list[str] = []
    run, model = _dispatch_run(store, events)
    with pytest.raises(StoreUnavailableError) as caught:
        await run
    assert exit_for_error(caught.value) == Exit.TRANSIENT  # retried, not failed for good
    assert store.refused == 1
    rows = [e.key for e in await store.list() if e.key.startswith("__oma_approval__/")]
    assert rows == [] and "approval_pending" not in events
    assert len(model.calls) == 1  # the Build task's one model call, nothing for Deploy


async def test_a_dispatch_suspension_that_cannot_be_saved_otherwise_is_the_gates_error(
    tmp_path: Path,
) -> None:
    """Not the store's failure (here a bare OSError no store would let through): the request's,
    APPROVAL_INTEGRITY_ERROR, which a dispatch gate reports as its error, as the reference."""
    store = RequestLosingStore(tmp_path / "store.json", lambda: OSError("disk full"))
    events: list[str] = []
    run, model = _dispatch_run(store, events)
    result = await run
    assert result.status.code == "error" and "could not be checkpointed" in str(
        result.status.message
    )
    assert [t.status for t in result.tasks] == ["completed", "skipped"]  # Deploy never ran
    assert store.refused == 1
    rows = [e.key for e in await store.list() if e.key.startswith("__oma_approval__/")]
    assert rows == [] and "approval_pending" not in events
    assert len(model.calls) == 1  # the Build task's one model call, nothing for Deploy
