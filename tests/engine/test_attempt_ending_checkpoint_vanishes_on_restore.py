"""A checkpoint that disappears while ``restore()`` is resuming it (after ``oma run`` saw it,
or between restore's own read and its claim) is lost: the attempt ends with
``CheckpointLostError`` (exit 13) and runs nothing. It must not come back as a run that
"succeeded" with no tasks, nor start the run over and repeat its side effects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma import local_run
from oma.approval import Suspend
from oma.checkpoint.attempts import attempts_key
from oma.checkpoint.keys import checkpoint_key
from oma.cli import app
from oma.errors import CheckpointLostError
from oma.local_run import run_spec
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.pod_contract import Exit
from oma.spec import RunSpec
from oma.store import FileStore
from oma.store.base import MemoryEntry
from oma.tools.builtin import builtin_tools
from tests.engine.approval_fixtures import Recorder, charge_team


class VanishingStore(FileStore):
    """A real file store that forgets the run's checkpoint (a flush, a restart without
    persistence, a hand-run delete racing the restore) just before its ``before``-th read, or
    just after its ``after``-th read. ``with_log``: the attempt log goes with it."""

    def __init__(
        self,
        path: Path,
        run_id: str,
        *,
        before: int | None = None,
        after: int | None = None,
        with_log: bool = False,
    ) -> None:
        super().__init__(path)
        self.key = checkpoint_key(run_id)
        self.before, self.after = before, after
        self.with_log = with_log
        self.reads = 0

    async def _forget(self) -> None:
        await self.delete(self.key)
        if self.with_log:
            await self.delete(attempts_key(self.key))

    async def get(self, key: str) -> MemoryEntry | None:
        if key != self.key:
            return await super().get(key)
        self.reads += 1
        if self.reads == self.before:
            await self._forget()
        entry = await super().get(key)
        if self.reads == self.after:
            await self._forget()
        return entry


def _spec(store: Path) -> RunSpec:
    script = {
        "# Task: Warm": [{"text": "warm"}],
        "# Task: Pay": [
            {"tool_calls": [{"id": "t1", "name": "tally", "input": {"item": "x"}}]},
            {"text": "paid"},
        ],
    }
    return RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": "w",
                    "tools": ["tally"],
                    "model": {"provider": "scripted", "script": script},
                }
            ],
            "tasks": [
                {"title": "Warm", "description": "Warm.", "assignee": "w"},
                {"title": "Pay", "description": "Pay.", "assignee": "w", "dependsOn": ["Warm"]},
            ],
            "approvals": {"dispatch": ["Pay"]},
            "store": {"file": {"path": str(store)}},
        }
    )


@pytest.fixture
def tally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tally.jsonl"
    monkeypatch.setenv("OMA_TALLY_PATH", str(path))
    return path


def _tallied(path: Path) -> bool:
    return path.exists()


async def _suspended_run(store: Path) -> None:
    """Attempt 1: Warm runs, Pay's dispatch waits for a reviewer (no decision is made)."""
    first = await run_spec(
        _spec(store), run_id="pay", tools=builtin_tools(), default_store_path=store
    )
    assert first.result.status.code == "suspended" and first.exit_code == Exit.SUSPENDED


async def test_a_checkpoint_gone_between_oma_runs_read_and_restores_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tally: Path
) -> None:
    path = tmp_path / "store.json"
    await _suspended_run(path)
    # oma run reads the checkpoint (read 1) and resumes; restore() reads it again (read 2) and,
    # told a checkpoint was there, does not take its absence for a run never started.
    store = VanishingStore(path, "pay", before=2)
    monkeypatch.setattr(local_run, "open_store", lambda spec, default: store)
    with pytest.raises(CheckpointLostError, match="one was expected"):
        await run_spec(_spec(path), run_id="pay", tools=builtin_tools(), default_store_path=path)
    assert store.reads == 2
    assert await FileStore(path).get(checkpoint_key("pay")) is None  # nothing written again
    assert not _tallied(tally)


def test_oma_run_exits_13_when_the_checkpoint_goes_while_it_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tally: Path
) -> None:
    path = tmp_path / "store.json"
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(_spec(path).model_dump(mode="json", by_alias=True)))
    runner = CliRunner()
    first = runner.invoke(app, ["run", str(spec_file), "--run-id", "pay"])
    assert first.exit_code == Exit.SUSPENDED, first.output
    store = VanishingStore(path, "pay", before=2)
    monkeypatch.setattr(local_run, "open_store", lambda spec, default: store)
    second = runner.invoke(app, ["run", str(spec_file), "--run-id", "pay"])
    assert second.exit_code == Exit.CHECKPOINT_LOST, second.output
    assert "checkpoint lost" in second.output and not tally.exists()


async def test_restore_told_to_expect_a_checkpoint_refuses_to_find_none(tmp_path: Path) -> None:
    """A caller that saw the checkpoint (or knows one was saved) says so; without any attempt
    log to tell, restore() would otherwise return an empty run that 'succeeded'."""
    recorder = Recorder()
    team, model = charge_team(recorder)
    store = FileStore(tmp_path / "store.json")
    options = CheckpointOptions(store=store, run_id="gone")
    with pytest.raises(CheckpointLostError, match="was expected"):
        await OpenMultiAgent().restore(team, checkpoint=options, expect_checkpoint=True)
    assert await store.list() == [] and model.calls == []
    # Not told: an empty store is a run never started, as the reference has it.
    result = await OpenMultiAgent().restore(team, checkpoint=options)
    assert result.status.code == "ok" and result.tasks == []


async def test_a_checkpoint_gone_between_restores_read_and_claim_is_not_started_over(
    tmp_path: Path,
) -> None:
    """restore(team, tasks) resumes what it read; the claim finds the checkpoint gone, and
    the re-read finds nothing: the run was there a moment ago, so it is lost, not new."""
    recorder = Recorder()
    team, _ = charge_team(recorder)
    tasks: list[dict[str, Any]] = [{"title": "Pay", "description": "Pay.", "assignee": "operator"}]
    path = tmp_path / "store.json"
    options = CheckpointOptions(store=FileStore(path), run_id="claim", fence=True)
    suspended = await OpenMultiAgent(on_tool_call=recorder.gate(Suspend("review"))).run_tasks(
        team, tasks, checkpoint=options
    )
    assert suspended.status.code == "suspended" and recorder.tool_calls == []
    # Read 1 is restore's; the checkpoint goes right after it (before the claim's write).
    store = VanishingStore(path, "claim", after=1, with_log=True)
    team, model = charge_team(recorder)
    again = CheckpointOptions(store=store, run_id="claim", fence=True)
    with pytest.raises(CheckpointLostError, match="while this attempt was resuming it"):
        await OpenMultiAgent(on_tool_call=recorder.gate(True)).restore(
            team, tasks, checkpoint=again
        )
    assert recorder.tool_calls == [] and model.calls == []  # nothing started over
    assert await store.get(checkpoint_key("claim")) is None
