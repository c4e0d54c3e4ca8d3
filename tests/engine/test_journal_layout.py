"""Checkpoints kept as a journal (a snapshot, then one delta per boundary) on a real Redis.

At every boundary the journal must hold exactly the snapshot the snapshot layout would have
written; a run drained mid-way resumes from it without running a committed call again; a
journal that does not fit its base is refused before anything runs; a stale writer is fenced
by the version alone; a run keeps the layout it started in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from oma import jsonutil
from oma.checkpoint import Checkpoint
from oma.checkpoint.journal import JournalWriter, load_journal
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.validation import MAX_SNAPSHOT_DEPTH
from oma.errors import (
    CheckpointDecodeError,
    CheckpointFencedError,
    CheckpointLostError,
    CheckpointValidationError,
)
from oma.local_run import run_spec
from oma.orchestrator import OrchestratorEvent, ProgressCallback
from oma.spec import RunSpec
from oma.store import RedisStore
from oma.tools.builtin import builtin_tools
from tests.fuzz.strategies import nested
from tests.servers.redis_server import RedisServer
from tests.unit import snapshot_fixtures

RUN = "journal-run"
TURNS = 6


def _script(prefix: str) -> list[dict[str, Any]]:
    calls = [
        {
            "tool_calls": [
                {
                    "id": f"{prefix}-{n}",
                    "name": "ledger_append",
                    "input": {"entry": f"{prefix} {n}"},
                }
            ]
        }
        for n in range(TURNS)
    ]
    return [*calls, {"text": f"{prefix} done"}]


def _spec(redis: RedisServer, namespace: str, layout: str = "journal") -> RunSpec:
    return RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": f"clerk-{p}",
                    "tools": ["ledger_append"],
                    "model": {"provider": "scripted", "script": _script(p)},
                }
                for p in "ab"
            ],
            "tasks": [
                {"title": "A", "description": "a", "assignee": "clerk-a"},
                {"title": "B", "description": "b", "assignee": "clerk-b", "dependsOn": ["A"]},
            ],
            "store": {"redis": {"url": redis.url, "namespace": namespace}, "layout": layout},
        }
    )


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("OMA_LEDGER_PATH", str(path))
    return path


def _entries(ledger: Path) -> list[str]:
    if not ledger.exists():
        return []
    return [json.loads(line)["entry"] for line in ledger.read_text().splitlines()]


async def _run(
    spec: RunSpec,
    tmp_path: Path,
    drain: asyncio.Event | None = None,
    on_progress: ProgressCallback | None = None,
) -> Any:
    return await run_spec(
        spec,
        run_id=RUN,
        tools=builtin_tools(),
        default_store_path=tmp_path / "unused.json",
        drain=drain,
        on_progress=on_progress,
    )


class _DrainAfterSaves:
    """An ``on_progress`` that drains the run once it has saved ``saves`` checkpoints (in
    either layout)."""

    def __init__(self, saves: int) -> None:
        self.saves = saves
        self.seen = 0
        self.drain = asyncio.Event()

    def __call__(self, event: OrchestratorEvent) -> None:
        if event.type == "checkpoint_saved":
            self.seen += 1
            if self.seen == self.saves:
                self.drain.set()


class _Watch:
    """Wraps ``JournalWriter.save``: after each save, the journal read back must be exactly
    the document the boundary built; optionally drains the run after ``drain_after`` saves."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, drain_after: int | None = None) -> None:
        self.saves = 0
        self.appends = 0
        self.bases = 0
        self.drain = asyncio.Event()
        original = JournalWriter.save

        async def save(
            writer: JournalWriter,
            wire: dict[str, Any],
            metadata: dict[str, Any],
            attempt: int | None,
        ) -> None:
            before = writer.current.base_bytes if writer.current is not None else None
            await original(writer, wire, metadata, attempt)
            found = await load_journal(writer.store, writer.key)
            assert found is not None
            assert jsonutil.dumps(found[0]) == jsonutil.dumps(wire)
            self.saves += 1
            assert writer.current is not None
            if before is not None and writer.current.tail_bytes > 0:
                self.appends += 1
            else:
                self.bases += 1
            if drain_after is not None and self.saves == drain_after:
                self.drain.set()

        monkeypatch.setattr(JournalWriter, "save", save)


async def test_every_boundary_reads_back_as_the_snapshot_it_built(
    redis_server: RedisServer, tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _Watch(monkeypatch)
    run = await _run(_spec(redis_server, "j-exact"), tmp_path)
    assert run.result.status.code == "ok"
    assert watch.saves > 4 * TURNS and watch.appends > watch.saves // 2 and watch.bases >= 2
    store = RedisStore(redis_server.url, namespace="j-exact")
    try:
        assert await store.get(checkpoint_key(RUN)) is None  # no whole snapshot beside it
        found = await load_journal(store, checkpoint_key(RUN))
        assert found is not None and found[1].layout == "journal"
    finally:
        await store.aclose()


async def test_a_drained_run_resumes_from_its_journal_without_repeating_a_call(
    redis_server: RedisServer, tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _Watch(monkeypatch, drain_after=9)
    spec = _spec(redis_server, "j-resume")
    first = await _run(spec, tmp_path, drain=watch.drain)
    assert first.result.status.code != "ok"
    done_before = _entries(ledger)
    assert 0 < len(done_before) < 2 * TURNS
    second = await _run(spec, tmp_path)
    assert second.resumed and second.result.status.code == "ok"
    assert _entries(ledger) == [f"{p} {n}" for p in "ab" for n in range(TURNS)]


@pytest.mark.parametrize(
    ("forged", "refusal"),
    [
        ([["s", ["inFlightTasks", 7, "turns"], 0]], "does not apply"),  # no such task
        # A path written relative to the one before it, keeping steps that are not there.
        ([["s", ["createdAt"], "t"], ["s", [4, "turns"], 0]], "keeps 4 of 1 steps"),
    ],
    ids=["absolute", "relative"],
)
async def test_a_record_that_does_not_fit_its_base_is_refused_before_anything_runs(
    redis_server: RedisServer,
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    forged: list[Any],
    refusal: str,
) -> None:
    watch = _Watch(monkeypatch, drain_after=5)
    namespace = f"j-corrupt-{len(forged)}"
    spec = _spec(redis_server, namespace)
    await _run(spec, tmp_path, drain=watch.drain)
    done = _entries(ledger)
    store = RedisStore(redis_server.url, namespace=namespace)
    try:
        version = await store.journal_version(checkpoint_key(RUN))
        assert await store.journal_write(
            checkpoint_key(RUN),
            [json.dumps(forged)],
            version="forged",
            expected=version,
            replace=False,
        )
    finally:
        await store.aclose()
    with pytest.raises(CheckpointDecodeError, match=rf"journal record .*{refusal}"):
        await _run(spec, tmp_path)
    assert _entries(ledger) == done


async def test_a_stale_writer_is_fenced_by_the_version_alone(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, namespace="j-fence")
    key = checkpoint_key(RUN)
    try:
        first = JournalWriter(store, key, fenced=True)
        pad = "x" * 500  # a base larger than a delta: the second save appends
        await first.save({"pad": pad, "n": 1, "log": [{"a": 1}]}, {}, 1)
        await first.save({"pad": pad, "n": 2, "log": [{"a": 1}, {"a": 2}]}, {}, 1)
        found = await load_journal(store, key)
        assert found is not None and found[1].records == 2
        second = JournalWriter(store, key, fenced=True)
        assert await second.claim({"n": 2, "log": [{"a": 1}, {"a": 2}]}, {}, found[1])
        assert not await JournalWriter(store, key, fenced=True).claim({"n": 0}, {}, found[1])
        with pytest.raises(CheckpointFencedError):
            await first.confirm()
        with pytest.raises(CheckpointFencedError):
            await first.save({"n": 3}, {}, 1)
        await second.save({"n": 3, "log": []}, {}, 2)
        await store.delete(key)  # the store forgot it
        with pytest.raises(CheckpointLostError):
            await second.confirm()
    finally:
        await store.aclose()


@pytest.mark.parametrize(("started", "resumed"), [("snapshot", "journal"), ("journal", "snapshot")])
async def test_a_run_keeps_the_layout_it_started_in(
    started: str,
    resumed: str,
    redis_server: RedisServer,
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = f"j-layout-{started}"
    if started == "journal":
        first = await _run(
            _spec(redis_server, namespace, started),
            tmp_path,
            drain=_Watch(monkeypatch, drain_after=5).drain,
        )
    else:
        saves = _DrainAfterSaves(5)
        first = await _run(
            _spec(redis_server, namespace, started), tmp_path, drain=saves.drain, on_progress=saves
        )
    assert first.result.status.code != "ok"  # drained mid-way
    second = await _run(_spec(redis_server, namespace, resumed), tmp_path)
    assert second.resumed and second.result.status.code == "ok"
    store = RedisStore(redis_server.url, namespace=namespace)
    try:
        journal = await store.journal_get(checkpoint_key(RUN))
        plain = await store.get(checkpoint_key(RUN))
        assert (journal is not None, plain is not None) == (
            started == "journal",
            started == "snapshot",
        )
    finally:
        await store.aclose()
    assert _entries(ledger) == [f"{p} {n}" for p in "ab" for n in range(TURNS)]


@pytest.mark.parametrize("source", ["written", "copied"])
async def test_a_journal_whose_delta_nests_too_deep_is_refused_as_a_snapshot_is(
    redis_server: RedisServer, source: str
) -> None:
    """The reader skips the walk of the whole document only when the parser bounded the base
    and every delta is measured by what it wrote: a delta that nests one level too deep, by a
    value it carries or by copying a deep part of the document further down, is refused."""
    store = RedisStore(redis_server.url, namespace=f"j-deep-{source}")
    key = checkpoint_key(RUN)
    base = snapshot_fixtures.v4_completed_in_flight()
    # A tool call's input: any JSON, 7 steps down; what it holds, at 8, reaches the limit.
    at = ["inFlightTasks", 0, "conversationMessages", 1, "content", 0, "input"]
    base["inFlightTasks"][0]["conversationMessages"][1]["content"][0]["input"] = {
        "held": nested(MAX_SNAPSHOT_DEPTH - 8)
    }
    if source == "written":
        ops: list[Any] = [["s", [*at, "more"], nested(MAX_SNAPSHOT_DEPTH - 7)]]
    else:  # the held value, copied one step further down than it was
        ops = [["s", [*at, "box"], {}], ["v", [*at, "box", "held"], [*at, "held"]]]
    try:
        assert await store.journal_write(
            key, [jsonutil.dumps(base)], version="v1", expected=None, replace=True
        )
        reader = Checkpoint(store, run_id=RUN)
        assert await reader.load_latest() is not None  # at the limit: loads
        found = await load_journal(store, key, MAX_SNAPSHOT_DEPTH)
        assert found is not None and found[1].within_depth  # and known to, without a walk
        assert await store.journal_write(
            key, [jsonutil.dumps(ops)], version="v2", expected="v1", replace=False
        )
        with pytest.raises(CheckpointValidationError, match=r"nested \d+ levels deep"):
            await reader.load_latest()
        found = await load_journal(store, key, MAX_SNAPSHOT_DEPTH)
        assert found is not None and not found[1].within_depth
    finally:
        await store.aclose()


async def test_a_journal_base_the_parser_cannot_bound_is_walked(
    redis_server: RedisServer,
) -> None:
    """A base nested past the limit, or holding a 19-digit run (read by the exact parser): not
    known to be within the limit, so the document is measured: refused in the first case,
    loaded in the second."""
    store = RedisStore(redis_server.url, namespace="j-deep-base")
    key = checkpoint_key(RUN)
    deep = snapshot_fixtures.v4_completed_in_flight()
    deep["inFlightTasks"][0]["conversationMessages"][1]["content"][0]["input"] = {
        "held": nested(MAX_SNAPSHOT_DEPTH - 7)
    }
    digits = snapshot_fixtures.v4_completed_in_flight()
    digits["inFlightTasks"][0]["conversationMessages"][1]["content"][0]["input"] = {
        "id": 1234567890123456789012
    }
    try:
        for version, base in (("deep", deep), ("digits", digits)):
            assert await store.journal_write(
                key, [jsonutil.dumps(base)], version=version, expected=None, replace=True,
                force=True,
            )  # fmt: skip
            found = await load_journal(store, key, MAX_SNAPSHOT_DEPTH)
            assert found is not None and not found[1].within_depth
        loaded = await Checkpoint(store, run_id=RUN).load_latest()  # the digits: exact
        assert loaded is not None
        assert (
            jsonutil.dumps(loaded.model_dump(mode="json", by_alias=True)).count(
                "1234567890123456789012"
            )
            == 1
        )
        await store.journal_write(
            key, [jsonutil.dumps(deep)], version="deep", expected=None, replace=True, force=True
        )
        with pytest.raises(CheckpointValidationError, match=r"nested \d+ levels deep"):
            await Checkpoint(store, run_id=RUN).load_latest()
    finally:
        await store.aclose()
