"""Checkpoint keys, the manager, round trips of every version, and the TypeScript data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oma.checkpoint import (
    CHECKPOINT_KEY_PREFIX,
    DEFAULT_CHECKPOINT_KEY,
    Checkpoint,
    CheckpointSnapshotV1,
    CheckpointSnapshotV4,
    checkpoint_key,
    is_checkpoint_key,
    parse_snapshot,
)
from oma.errors import CheckpointDecodeError, CheckpointValidationError
from oma.store import FileStore, InMemoryStore
from tests.conformance_data import load_json, store_files
from tests.unit import snapshot_fixtures as fx


def test_key_helpers() -> None:
    assert CHECKPOINT_KEY_PREFIX == "__oma_checkpoint__/"
    assert DEFAULT_CHECKPOINT_KEY == "__oma_checkpoint__/latest"
    assert checkpoint_key() == checkpoint_key("") == DEFAULT_CHECKPOINT_KEY
    assert checkpoint_key("run/1 x") == "__oma_checkpoint__/run/1 x/latest"
    assert is_checkpoint_key("__oma_checkpoint__/r/latest")
    assert not is_checkpoint_key("agent/__oma_checkpoint__/")


def test_explicit_key_wins_over_run_id() -> None:
    store = InMemoryStore()
    assert Checkpoint(store, run_id="r", key="custom").key == "custom"
    assert Checkpoint(store, run_id="r").key == "__oma_checkpoint__/r/latest"
    assert Checkpoint(store).key == DEFAULT_CHECKPOINT_KEY


@pytest.mark.parametrize(
    "factory",
    [fx.v1, fx.v2, fx.v2_queue_v2, fx.v3, fx.v4_tool_calls, fx.v4_suspended, fx.v4_decided],
    ids=["v1", "v2", "v2-queue-v2", "v3", "v4-tool-calls", "v4-suspended", "v4-decided"],
)
async def test_round_trip_through_a_store_is_exact(factory: object, tmp_path: Path) -> None:
    assert callable(factory)
    raw = factory()
    snapshot = parse_snapshot(raw, "k")
    store = FileStore(tmp_path / "cp.json")
    checkpoint = Checkpoint(store, run_id="any")
    await checkpoint.save(snapshot)
    loaded = await Checkpoint(FileStore(tmp_path / "cp.json"), run_id="any").load_latest()
    assert loaded is not None
    assert json.loads(loaded.to_json()) == raw
    assert loaded == snapshot


async def test_save_writes_reference_metadata() -> None:
    store = InMemoryStore()
    snapshot = parse_snapshot(fx.v4_tool_calls(), "k")
    assert isinstance(snapshot, CheckpointSnapshotV4)
    await Checkpoint(store, run_id="conf-b").save(snapshot)
    entry = await store.get("__oma_checkpoint__/conf-b/latest")
    assert entry is not None
    assert entry.metadata == {
        "namespace": "checkpoint",
        "version": 4,
        "runId": "conf-b",
        "createdAt": snapshot.created_at,
    }


async def test_v1_without_run_id_gets_the_managers_run_id() -> None:
    raw = fx.v1()
    del raw["runId"]
    snapshot = parse_snapshot(raw, "k")
    store = InMemoryStore()
    await Checkpoint(store, run_id="legacy-2").save(snapshot)
    loaded = await Checkpoint(store, run_id="legacy-2").load_latest()
    assert isinstance(loaded, CheckpointSnapshotV1) and loaded.run_id == "legacy-2"
    entry = await store.get(checkpoint_key("legacy-2"))
    assert entry is not None and entry.metadata is not None
    assert entry.metadata["runId"] == "legacy-2" and entry.metadata["version"] == 1


async def test_absent_checkpoint_loads_none_and_delete_removes_it() -> None:
    store = InMemoryStore()
    checkpoint = Checkpoint(store, run_id="r")
    assert await checkpoint.load_latest() is None
    await checkpoint.save(parse_snapshot(fx.v2(), "k"))
    assert await checkpoint.load() is not None
    await checkpoint.delete()
    assert await checkpoint.load_latest() is None


async def test_non_json_value_is_a_decode_error() -> None:
    store = InMemoryStore()
    await store.set(checkpoint_key("r"), '{"version": 4, "mode": ')
    with pytest.raises(
        CheckpointDecodeError,
        match='stored value at "__oma_checkpoint__/r/latest" is not valid JSON',
    ):
        await Checkpoint(store, run_id="r").load_latest()


async def test_invalid_snapshot_is_a_validation_error() -> None:
    store = InMemoryStore()
    await store.set(checkpoint_key("r"), '{"version": 4}')
    with pytest.raises(CheckpointValidationError) as caught:
        await Checkpoint(store, run_id="r").load_latest()
    assert caught.value.code == "CHECKPOINT_INVALID"
    assert "mode: Field required" in str(caught.value)


async def test_json_with_lone_surrogates_and_big_integers_still_loads() -> None:
    raw = fx.v4_tool_calls()
    raw["inFlightTasks"][0]["pendingToolCalls"][1]["call"]["input"] = {
        "label": "\ud800",
        "n": 2**70,
    }
    text = json.dumps(raw)
    store = InMemoryStore()
    await store.set(checkpoint_key("conf-b"), text)
    loaded = await Checkpoint(store, run_id="conf-b").load_latest()
    assert loaded is not None
    assert json.loads(loaded.to_json()) == raw


@pytest.mark.parametrize("path", store_files(), ids=lambda p: p.name)
async def test_every_typescript_checkpoint_loads(path: Path) -> None:
    keys = [e.key for e in await FileStore(path).list() if is_checkpoint_key(e.key)]
    assert keys, f"{path.name} holds no checkpoint"
    for key in keys:
        snapshot = await Checkpoint(FileStore(path), key=key).load_latest()
        assert snapshot is not None and snapshot.version == 4


def test_every_typescript_write_in_the_history_loads() -> None:
    history = load_json("a-checkpoint-write-history.json")
    assert len(history["writes"]) == 7
    for write in history["writes"]:
        value = write.get("value") or write.get("raw")
        assert isinstance(value, str), sorted(write)
        assert parse_snapshot(json.loads(value), "k").version == 4


def test_legacy_cases_load_exactly_as_the_typescript_loader_decided() -> None:
    cases = load_json("f-legacy-snapshots.json")["cases"]
    assert len(cases) >= 10
    for case in cases:
        if case["loadLatest"]["ok"]:
            assert parse_snapshot(case["snapshot"], "k").version == case["loadLatest"]["version"]
        else:
            with pytest.raises(CheckpointValidationError):
                parse_snapshot(case["snapshot"], "k")
