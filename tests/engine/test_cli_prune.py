"""``oma checkpoint prune --older-than``: checkpoints last saved longer ago go with their attempt
logs; recent ones, ones without a save time and approval rows stay."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma.checkpoint.stored import RemovedRun, remove_run
from oma.cli import app
from oma.store import FileStore
from oma.store.urls import open_store
from tests.conformance_data import require_conformance_dir
from tests.servers.redis_server import RedisServer

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
APPROVAL_ROW = "__oma_approval__/old/req-1"


def _cli(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["checkpoint", *args], input=stdin)
    return result.exit_code, result.output


def _stamp(days_ago: float) -> str:
    moment = datetime.now(UTC) - timedelta(days=days_ago)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _store_with_three_runs(tmp_path: Path) -> Path:
    """A file store holding run "old" (saved 10 days ago, with an attempt log and an approval
    row), "recent" (an hour ago) and "unknown" (no save time recorded, as a reference writer
    may leave it). The values are the same snapshot of a real run."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "store.json"
    demo = REPO / "examples" / "demo.yaml"
    assert (
        runner.invoke(app, ["run", str(demo), "--run-id", "seed", "--store", str(path)]).exit_code
        == 0
    )
    store = FileStore(path)

    async def fill() -> None:
        seeded = await store.get("__oma_checkpoint__/seed/latest")
        log = await store.get("__oma_checkpoint__/seed/attempts")
        assert seeded is not None and log is not None
        await store.clear()
        runs: list[tuple[str, dict[str, Any]]] = [
            ("old", {"runId": "old", "createdAt": _stamp(10)}),
            ("recent", {"runId": "recent", "createdAt": _stamp(1 / 24)}),
            ("unknown", {"runId": "unknown"}),
        ]
        for run_id, metadata in runs:
            await store.set(f"__oma_checkpoint__/{run_id}/latest", seeded.value, metadata)
        await store.set("__oma_checkpoint__/old/attempts", log.value, {"runId": "old"})
        await store.set(APPROVAL_ROW, '{"decision": "approved"}', {"namespace": "approvals"})

    asyncio.run(fill())
    return path


def _keys(path: Path) -> set[str]:
    return {entry["key"] for entry in json.loads(path.read_text())["entries"]}


def test_a_dry_run_says_what_would_go_and_deletes_nothing(tmp_path: Path) -> None:
    path = _store_with_three_runs(tmp_path)
    before = _keys(path)
    code, out = _cli("prune", "--older-than", "7d", "--dry-run", "--store", f"file://{path}")
    assert code == 0, out
    assert "would delete old  saved " in out and "recent" not in out.split("kept")[0]
    assert "kept __oma_checkpoint__/unknown/latest: no save time recorded" in out
    assert "would delete 1 checkpoints last saved before " in out
    assert _keys(path) == before


def test_old_checkpoints_go_with_their_attempt_logs_and_approval_rows_stay(
    tmp_path: Path,
) -> None:
    path = _store_with_three_runs(tmp_path)
    code, out = _cli("prune", "--older-than", "7d", "--yes", "--store", f"file://{path}", "--json")
    assert code == 0, out
    document = json.loads(out)
    assert [run["runId"] for run in document["deleted"]] == ["old"]
    assert document["keptWithoutSaveTime"] == ["__oma_checkpoint__/unknown/latest"]
    assert _keys(path) == {
        "__oma_checkpoint__/recent/latest",
        "__oma_checkpoint__/unknown/latest",
        APPROVAL_ROW,  # the record of who decided what
    }
    code, out = _cli("prune", "--older-than", "30m", "--yes", "--store", f"file://{path}")
    assert code == 0 and "deleted recent  saved " in out  # an hour old is older than 30 minutes
    assert "__oma_checkpoint__/recent/latest" not in _keys(path)


@pytest.mark.parametrize("age", ["7", "7 days", "-1d", "1y", ""])
def test_an_age_that_is_not_one_is_refused(tmp_path: Path, age: str) -> None:
    path = _store_with_three_runs(tmp_path)
    code, out = _cli("prune", "--older-than", age, "--yes", "--store", f"file://{path}")
    assert code == 2 and "is not an age: give a number and a unit, e.g. 90s, 30m" in out
    assert "__oma_checkpoint__/old/latest" in _keys(path)


def test_without_yes_it_asks_and_refuses_without_a_terminal(tmp_path: Path) -> None:
    path = _store_with_three_runs(tmp_path)
    code, out = _cli("prune", "--older-than", "7d", "--store", f"file://{path}")
    assert code == 2 and "refusing to prune without --yes (stdin is not a terminal)" in out
    assert "__oma_checkpoint__/old/latest" in _keys(path)


def test_a_run_kept_as_a_journal_is_pruned_whole(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Redis, `oma run` keeps its checkpoint as a journal: prune removes the journal (every
    record) and the attempt log."""
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "agents": [
                    {
                        "name": "clerk",
                        "tools": ["ledger_append"],
                        "model": {"provider": "scripted", "script": [{"text": "ok"}]},
                    }
                ],
                "tasks": [{"title": "T", "description": "t", "assignee": "clerk"}],
                "store": {"redis": {"url": redis_server.url, "namespace": "prune"}},
            }
        )
    )
    assert runner.invoke(app, ["run", str(spec), "--run-id", "jr"]).exit_code == 0
    url = f"{redis_server.url}?namespace=prune"
    code, out = _cli("prune", "--older-than", "1h", "--yes", "--store", url)
    assert code == 0 and "deleted 0 checkpoints" in out  # saved a moment ago
    code, out = _cli("prune", "--older-than", "0s", "--yes", "--store", url)
    assert code == 0 and "deleted jr  saved " in out, out

    async def left() -> tuple[object, object]:
        store: Any = open_store(url)
        try:
            version = await store.journal_version("__oma_checkpoint__/jr/latest")
            return version, await store.get("__oma_checkpoint__/jr/attempts")
        finally:
            await store.aclose()

    assert asyncio.run(left()) == (None, None)


def test_removing_a_run_takes_its_checkpoint_attempt_log_and_approval_rows_only(
    tmp_path: Path,
) -> None:
    """``remove_run`` (the operator's retention.deleteStoreRecords) on stores written by the
    TypeScript implementation: everything of run conf-c goes (its checkpoint, the attempt log
    added here, its approval row); run conf-d's checkpoint and rows, in the same store, stay."""
    path = tmp_path / "store.json"
    shutil.copy(require_conformance_dir() / "c1-suspended.store.json", path)
    store = FileStore(path)
    conf_d = json.loads((require_conformance_dir() / "d1-suspended.store.json").read_text())

    async def run() -> tuple[RemovedRun, set[str]]:
        for entry in conf_d["entries"]:
            await store.set(entry["key"], entry["value"], entry.get("metadata"))
        await store.set("__oma_checkpoint__/conf-c/attempts", "{}", {"runId": "conf-c"})
        removed = await remove_run(store, "conf-c")
        return removed, {entry.key for entry in await store.list()}

    removed, left = asyncio.run(run())
    assert removed == RemovedRun(checkpoint=True, approval_rows=1)
    assert left == {entry["key"] for entry in conf_d["entries"]}


def test_runs_that_may_still_go_on_are_kept_unless_forced(tmp_path: Path) -> None:
    """A run waiting for approvals (the TypeScript store, saved days ago) and one whose latest
    attempt has no recorded end (it may be running a long call) are kept; --force takes them."""
    path = tmp_path / "store.json"
    shutil.copy(require_conformance_dir() / "c1-suspended.store.json", path)
    seeded = _store_with_three_runs(tmp_path / "seed")
    store = FileStore(path)

    async def add_a_running_run() -> None:
        seed = FileStore(seeded)
        snapshot = await seed.get("__oma_checkpoint__/old/latest")
        log = await seed.get("__oma_checkpoint__/old/attempts")
        assert snapshot is not None and log is not None
        open_attempt = json.loads(log.value)
        for record in open_attempt["attempts"]:
            for field in ("endedAt", "outcome", "message", "executedToolCalls",
                          "replayedToolCalls"):  # fmt: skip
                record.pop(field, None)
        await store.set("__oma_checkpoint__/busy/latest", snapshot.value, snapshot.metadata)
        await store.set("__oma_checkpoint__/busy/attempts", json.dumps(open_attempt), None)

    asyncio.run(add_a_running_run())
    code, out = _cli("prune", "--older-than", "1d", "--yes", "--store", f"file://{path}")
    assert code == 0, out
    assert "kept __oma_checkpoint__/conf-c/latest: it waits for approval decisions" in out
    assert "kept __oma_checkpoint__/busy/latest: attempt 1 has no recorded end" in out
    assert "deleted 0 checkpoints" in out
    code, out = _cli("prune", "--older-than", "1d", "--yes", "--force", "--store", f"file://{path}")
    assert code == 0 and "deleted 2 checkpoints" in out, out
    assert not [k for k in _keys(path) if k.startswith("__oma_checkpoint__/")]
