"""The FileStore state file: damaged bytes are ``StoreCorruptError`` and the file is left as it
was; what is read is written back unchanged."""

from __future__ import annotations

import asyncio
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oma.errors import StoreCorruptError
from oma.store import FileStore
from oma.store.base import MemoryEntry
from oma.store.file_format import decode_state_file, encode_state_file
from tests.fuzz import seeds
from tests.fuzz.strategies import edge_text, huge_text, json_objects, mutated, nested
from tests.fuzz.tally import examples, record

file_index = st.integers(min_value=0, max_value=1000)


def _assert_rewrites_unchanged(entries: dict[str, MemoryEntry]) -> None:
    """Encoding what was decoded and decoding it again loses and changes nothing."""
    again = decode_state_file("again", encode_state_file(entries))
    assert again == entries
    assert list(again) == list(entries)  # insertion order is the store's list() order


@settings(max_examples=examples(150))
@given(index=file_index, cut=st.floats(0, 1, exclude_max=True))
def test_truncated_store_file_is_corrupt(index: int, cut: float) -> None:
    data = seeds.store_file_bytes(index)
    with pytest.raises(StoreCorruptError) as caught:
        decode_state_file("f", data[: int(len(data) * cut)])
    assert caught.value.location == "f"
    record("store file: truncated", "typed")


@settings(max_examples=examples(200))
@given(index=file_index, change=st.data())
def test_mutated_store_file_is_corrupt_or_rewrites_unchanged(
    index: int, change: st.DataObject
) -> None:
    doc, _ = change.draw(mutated(json.loads(seeds.store_file_bytes(index))))
    try:
        entries = decode_state_file("f", json.dumps(doc).encode())
    except StoreCorruptError:
        record("store file: mutated structure", "typed")
        return
    _assert_rewrites_unchanged(entries)
    record("store file: mutated structure", "valid")


@settings(max_examples=examples(150))
@given(
    data=st.binary(max_size=400)
    | st.integers(1, 5000).map(lambda n: b'{"version":1,"entries":' + b"[" * n + b"]" * n + b"}")
    | edge_text.map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_arbitrary_bytes_are_corrupt_or_rewrite_unchanged(data: bytes) -> None:
    try:
        entries = decode_state_file("f", data)
    except StoreCorruptError:
        record("store file: arbitrary bytes", "typed")
        return
    _assert_rewrites_unchanged(entries)
    record("store file: arbitrary bytes", "valid")


@settings(max_examples=examples(150))
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"key": edge_text, "value": edge_text | huge_text, "createdAt": edge_text},
            optional={"metadata": json_objects(6), "expiresAtTurn": st.integers()},
        ),
        max_size=4,
    )
)
def test_entries_with_awkward_text_are_corrupt_or_rewrite_unchanged(
    rows: list[dict[str, Any]],
) -> None:
    for index, row in enumerate(rows):  # half of the timestamps are real ones
        if index % 2 == 0:
            row["createdAt"] = "2026-12-01T00:00:00.000Z"
    data = json.dumps({"version": 1, "entries": rows}).encode()
    try:
        entries = decode_state_file("f", data)
    except StoreCorruptError:
        record("store file: awkward entries", "typed")
        return
    for row in rows:
        assert entries[row["key"]].value == next(
            r["value"] for r in reversed(rows) if r["key"] == row["key"]
        )
    _assert_rewrites_unchanged(entries)
    record("store file: awkward entries", "valid")


@settings(max_examples=examples(25))
@given(index=file_index, cut=st.floats(0, 1, exclude_max=True), key=edge_text)
def test_file_store_refuses_a_damaged_file_and_leaves_it_alone(
    index: int, cut: float, key: str
) -> None:
    data = seeds.store_file_bytes(index)
    damaged = data[: int(len(data) * cut)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.json"
        path.write_bytes(damaged)

        async def go() -> None:
            store = FileStore(path)
            with pytest.raises(StoreCorruptError):
                await store.get(key)
            with pytest.raises(StoreCorruptError):
                await store.set(key, "value")

        asyncio.run(go())
        assert path.read_bytes() == damaged, "a store refused the file but rewrote it"
    record("store file: FileStore on damaged file", "typed")


@settings(max_examples=examples(25))
@given(
    items=st.dictionaries(
        edge_text, st.tuples(edge_text | huge_text, json_objects(6) | st.none()), max_size=4
    )
)
def test_file_store_keeps_awkward_values_across_processes(
    items: dict[str, tuple[str, dict[str, Any] | None]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.json"

        async def go() -> dict[str, tuple[str, Any]]:
            writer = FileStore(path)
            for key, (value, metadata) in items.items():
                await writer.set(key, value, metadata)
            reader = FileStore(path)  # a fresh store reads the file, as another process would
            return {e.key: (e.value, e.metadata) for e in await reader.list()}

        assert asyncio.run(go()) == items
    record("store file: FileStore round trip", "valid")


def test_encoding_refuses_metadata_json_cannot_hold() -> None:
    from oma.errors import StoreError

    entry = MemoryEntry(
        key="k", value="v", metadata={"deep": nested(5000)}, created_at=datetime.now(UTC)
    )
    with pytest.raises(StoreError):
        encode_state_file({"k": entry})
