"""Snapshots: malformed input is a typed checkpoint error; valid input round-trips unaltered."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oma import jsonutil
from oma.checkpoint import Checkpoint, CheckpointSnapshot, decode_snapshot, parse_snapshot
from oma.checkpoint.validation import MAX_SNAPSHOT_DEPTH
from oma.errors import CheckpointDecodeError, CheckpointValidationError
from oma.store import FileStore, InMemoryStore
from oma.store.base import MemoryStore
from tests.fuzz import seeds
from tests.fuzz.strategies import (
    any_json_scalars,
    edge_text,
    huge_text,
    json_values,
    mutated,
    nested,
)
from tests.fuzz.tally import examples, record

KEY = "__oma_checkpoint__/fuzz/latest"
RULES = {"2.6.1", "2.6.2", "2.6.3", "2.6.4", "2.6.5", "2.6.6"}
seed_index = st.integers(min_value=0, max_value=1000)


def _assert_round_trips(snapshot: CheckpointSnapshot) -> None:
    """Written, a snapshot reads back as the model that wrote it, and writes the same text.

    Compared on the wire: nothing may change.
    """
    text = snapshot.to_json()
    again = decode_snapshot(text, KEY)
    assert again.to_wire() == snapshot.to_wire()
    assert again.to_json() == text


def _check_typed(error: CheckpointValidationError) -> None:
    assert error.problems, "a validation error must name at least one problem"
    assert error.rules and error.rules <= RULES
    assert error.key == KEY


@settings(max_examples=examples(150))
@given(index=seed_index, cut=st.floats(0, 1, exclude_max=True))
def test_truncated_snapshot_is_a_decode_error(index: int, cut: float) -> None:
    text = json.dumps(seeds.snapshot(index), ensure_ascii=False)
    # A strict prefix of a JSON object is never JSON.
    with pytest.raises(CheckpointDecodeError) as caught:
        decode_snapshot(text[: int(len(text) * cut)], KEY)
    assert caught.value.key == KEY
    record("snapshot: truncated text", "typed")


@settings(max_examples=examples(250))
@given(index=seed_index, change=st.data())
def test_mutated_snapshot_is_typed_or_round_trips(index: int, change: st.DataObject) -> None:
    doc, _ = change.draw(mutated(seeds.snapshot(index)))
    try:
        snapshot = parse_snapshot(doc, KEY)
    except CheckpointValidationError as error:
        _check_typed(error)
        record("snapshot: mutated structure", "typed")
        return
    _assert_round_trips(snapshot)
    record("snapshot: mutated structure", "valid")


@settings(max_examples=examples(150))
@given(index=seed_index, position=st.integers(min_value=0), byte=st.integers(0, 255))
def test_corrupted_snapshot_bytes_are_typed_or_round_trip(
    index: int, position: int, byte: int
) -> None:
    data = bytearray(json.dumps(seeds.snapshot(index)).encode())
    data[position % len(data)] = byte
    text = data.decode("utf-8", "replace")
    try:
        snapshot = decode_snapshot(text, KEY)
    except (CheckpointDecodeError, CheckpointValidationError):
        record("snapshot: corrupted bytes", "typed")
        return
    _assert_round_trips(snapshot)
    record("snapshot: corrupted bytes", "valid")


@settings(max_examples=examples(100))
@given(value=json_values(8, scalars=any_json_scalars) | huge_text | st.just(float("nan")))
def test_any_json_value_is_typed_or_a_snapshot(value: Any) -> None:
    try:
        parse_snapshot(value, KEY)
    except CheckpointValidationError as error:
        _check_typed(error)
        record("snapshot: arbitrary JSON", "typed")
        return
    raise AssertionError(f"arbitrary JSON {value!r:.200} parsed as a snapshot")


@settings(max_examples=examples(20))
@given(index=seed_index, depth=st.integers(MAX_SNAPSHOT_DEPTH, 1000))
def test_deeply_nested_snapshot_is_refused_on_load(index: int, depth: int) -> None:
    """Deeper than a snapshot can ever be written back: refused at once, not on first save."""
    doc = seeds.snapshot(index)
    doc["metadata"] = {"deep": nested(depth)}
    with pytest.raises(CheckpointValidationError) as caught:
        decode_snapshot(jsonutil.dumps(doc), KEY)
    assert "nested" in str(caught.value)
    record("snapshot: deep nesting", "typed")


def test_snapshot_text_nested_past_the_parser_limit_is_a_decode_error() -> None:
    with pytest.raises(CheckpointDecodeError):
        decode_snapshot("[" * 100_000 + "]" * 100_000, KEY)


def test_unknown_null_fields_survive_a_round_trip() -> None:
    """The reference's JSON.stringify keeps an unknown field whose value is null; so do we,
    at every level, while declared optional fields that are None stay omitted."""
    doc = seeds.snapshot(0)
    doc["futureTop"] = None
    doc["completedTaskResults"][0]["futureField"] = None
    doc["queue"]["tasks"][0]["futureTaskField"] = None
    snapshot = parse_snapshot(doc, KEY)
    written = jsonutil.loads(snapshot.to_json())
    assert written["futureTop"] is None
    assert written["completedTaskResults"][0] == doc["completedTaskResults"][0]
    assert written["queue"]["tasks"][0] == doc["queue"]["tasks"][0]
    assert set(written) == set(doc)  # absent optional fields (None) stay absent, not null


def test_big_integers_survive_a_snapshot_round_trip() -> None:
    doc = seeds.snapshot(0)
    doc["queue"]["tasks"][0]["metadata"] = {"id": 2**64 + 1, "neg": -(2**63) - 1}
    snapshot = parse_snapshot(doc, KEY)
    assert decode_snapshot(snapshot.to_json(), KEY) == snapshot


# -- valid mutations: arbitrary content where a snapshot carries free text or JSON ----------


def _v4_with_messages(index: int) -> dict[str, Any]:
    """A seed with at least one in-flight task (where conversations live)."""
    for offset in range(50):
        doc = seeds.snapshot(index + offset)
        if doc.get("version") in (3, 4) and doc.get("inFlightTasks"):
            return doc
    raise AssertionError("no seed snapshot has in-flight tasks")


@st.composite
def valid_variants(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[list[Any], Any]]]:
    """A valid snapshot with arbitrary text and JSON injected, and where each value went."""
    doc = _v4_with_messages(draw(seed_index))
    injected: list[tuple[list[Any], Any]] = []

    def put(path: list[Any], value: Any) -> None:
        target = doc
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        injected.append((path, value))

    text = draw(edge_text | huge_text)
    messages = doc["inFlightTasks"][0]["conversationMessages"]
    messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    injected.append((["inFlightTasks", 0, "conversationMessages", len(messages) - 1], messages[-1]))
    put(["goal"], draw(edge_text))
    put(["queue", "tasks", 0, "description"], draw(edge_text))
    put(["queue", "tasks", 0, "metadata"], draw(st.dictionaries(edge_text, json_values(8))))
    block = {"type": "text", "text": draw(edge_text), "extra": draw(json_values(8))}
    messages.append({"role": "assistant", "content": [block], "free": draw(json_values(8))})
    injected.append((["inFlightTasks", 0, "conversationMessages", len(messages) - 1], messages[-1]))
    # Non-null: a null unknown field is dropped on write (test_unknown_null_fields_...).
    put(["unknownTopLevelField"], draw(json_values(8).filter(lambda v: v is not None)))
    return doc, injected


def _at(doc: Any, path: list[Any]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


async def _save_and_load(store: MemoryStore, snapshot: CheckpointSnapshot) -> CheckpointSnapshot:
    checkpoint = Checkpoint(store, key=KEY)
    await checkpoint.save(snapshot)
    loaded = await Checkpoint(store, key=KEY).load_latest()
    assert loaded is not None
    return loaded


@settings(max_examples=examples(120))
@given(variant=valid_variants())
def test_valid_snapshot_save_load_alters_nothing(
    variant: tuple[dict[str, Any], list[tuple[list[Any], Any]]],
) -> None:
    doc, injected = variant
    snapshot = parse_snapshot(doc, KEY)
    loaded = asyncio.run(_save_and_load(InMemoryStore(), snapshot))
    assert loaded == snapshot
    wire = jsonutil.loads(loaded.to_json())
    for path, value in injected:
        assert _at(wire, path) == value, f"{path} was altered by save/load"
    record("snapshot: valid save/load", "valid")


@settings(max_examples=examples(25))
@given(variant=valid_variants())
def test_valid_snapshot_survives_a_file_store(
    variant: tuple[dict[str, Any], list[tuple[list[Any], Any]]],
) -> None:
    doc, injected = variant
    snapshot = parse_snapshot(doc, KEY)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.json"
        asyncio.run(_save_and_load(FileStore(path), snapshot))
        # A fresh store (a new process, in effect) reads the file itself.
        loaded = asyncio.run(Checkpoint(FileStore(path), key=KEY).load_latest())
    assert loaded == snapshot
    wire = jsonutil.loads(loaded.to_json())
    for at, value in injected:
        assert _at(wire, at) == value, f"{at} was altered by the file store"
    record("snapshot: valid via FileStore", "valid")
