"""FileStore specifics: durability across instances, strict loading, atomic writes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oma.errors import StoreCorruptError, StoreError
from oma.store import FileStore
from tests.conformance_data import store_files


async def test_missing_file_is_empty_and_first_write_creates_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "state.json"
    store = FileStore(path)
    assert await store.list() == []
    assert not path.exists()
    await store.set("k", "v")
    assert json.loads(path.read_text())["entries"][0]["key"] == "k"


async def test_a_new_instance_reads_what_the_first_wrote(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = FileStore(path)
    await first.set("a", "1", {"agent": "alice"})
    await first.set_with_expiry("b", "2", 5)
    await first.set("a", "3")
    created = await first.get("a")
    second = FileStore(path)
    entries = await second.list()
    assert [(e.key, e.value, e.metadata, e.expires_at_turn) for e in entries] == [
        ("a", "3", None, None),
        ("b", "2", None, 5),
    ]
    assert created is not None
    assert abs((entries[0].created_at - created.created_at).total_seconds()) < 0.001


async def test_file_format_is_the_reference_document(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = FileStore(path)
    await store.set("k", "v", {"m": True})
    document = json.loads(path.read_text())
    assert document["version"] == 1
    (entry,) = document["entries"]
    assert set(entry) == {"key", "value", "metadata", "createdAt"}
    assert entry["createdAt"].endswith("Z") and len(entry["createdAt"]) == 24
    assert os.stat(path).st_mode & 0o777 == 0o600


def _entry(**fields: object) -> dict[str, object]:
    return {"key": "k", "value": "v", "createdAt": "2026-08-08T00:00:00.000Z", **fields}


CORRUPT_FILES: dict[str, tuple[bytes, str]] = {
    "empty file": (b"", "not valid JSON"),
    "truncated": (b'{"version":1,"entries":[{"key":"k","val', "not valid JSON"),
    "garbage": (b"\x00\x01\x02not json", "not valid JSON"),
    "array root": (b"[]", "not a JSON object"),
    "wrong version": (b'{"version":2,"entries":[]}', "unsupported state file version 2"),
    "no version": (b'{"entries":[]}', "unsupported state file version None"),
    "entries missing": (b'{"version":1}', 'missing "entries" array'),
    "entries not array": (b'{"version":1,"entries":{}}', 'missing "entries" array'),
    "entry not object": (b'{"version":1,"entries":[1]}', "entry 0 is not an object"),
    "key missing": (
        json.dumps({"version": 1, "entries": [_entry(key=None)]}).encode(),
        'no string "key"',
    ),
    "value not string": (
        json.dumps({"version": 1, "entries": [_entry(value=5)]}).encode(),
        'no string "value"',
    ),
    "createdAt missing": (
        json.dumps({"version": 1, "entries": [_entry(createdAt=None)]}).encode(),
        'no string "createdAt"',
    ),
    "createdAt unparsable": (
        json.dumps({"version": 1, "entries": [_entry(createdAt="yesterday")]}).encode(),
        "unparsable createdAt",
    ),
    "metadata null": (
        json.dumps({"version": 1, "entries": [_entry(metadata=None)]}).encode(),
        "non-object metadata",
    ),
    "metadata array": (
        json.dumps({"version": 1, "entries": [_entry(metadata=[1])]}).encode(),
        "non-object metadata",
    ),
    "metadata string": (
        json.dumps({"version": 1, "entries": [_entry(metadata="x")]}).encode(),
        "non-object metadata",
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPT_FILES))
async def test_corrupt_file_raises_naming_file_and_problem(tmp_path: Path, case: str) -> None:
    content, problem = CORRUPT_FILES[case]
    path = tmp_path / "state.json"
    path.write_bytes(content)
    store = FileStore(path)
    with pytest.raises(StoreCorruptError) as caught:
        await store.get("k")
    assert str(path) in str(caught.value)
    assert problem in caught.value.problem
    # Never silently starts empty: writes refuse too, the instance stays poisoned, bytes untouched.
    with pytest.raises(StoreCorruptError):
        await store.set("k", "new")
    with pytest.raises(StoreCorruptError):
        await store.list()
    assert path.read_bytes() == content


async def test_non_numeric_expiry_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "entries": [_entry(expiresAtTurn="soon")]}))
    entry = await FileStore(path).get("k")
    assert entry is not None and entry.expires_at_turn is None


async def test_directory_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreCorruptError, match="is a directory"):
        await FileStore(tmp_path).get("k")


async def test_failed_write_changes_neither_disk_nor_memory(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = FileStore(path)
    await store.set("k", "old")
    before = path.read_bytes()
    # Directories where the next temp files would go make every write fail (EISDIR).
    blockers = [tmp_path / f"state.json.tmp-{os.getpid()}-{n}" for n in range(1, 40)]
    for blocker in blockers:
        blocker.mkdir()
    with pytest.raises(StoreError, match="cannot write store file") as caught:
        await store.set("k", "new")
    assert not isinstance(caught.value, StoreCorruptError)
    with pytest.raises(StoreError, match="cannot write store file"):
        await store.compare_and_set("k", "old", "new")
    entry = await store.get("k")
    assert entry is not None and entry.value == "old"
    assert path.read_bytes() == before
    for blocker in blockers:
        blocker.rmdir()
    await store.set("other", "x")  # a later write succeeds and carries the unchanged state
    on_disk = [(e.key, e.value) for e in await FileStore(path).list()]
    assert on_disk == [("k", "old"), ("other", "x")]


async def test_cancelled_write_still_completes_in_order(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = FileStore(path)
    await store.set("k", "0")
    writer = asyncio.create_task(store.set("k", "1"))
    await asyncio.sleep(0)
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    await store.set("k", "2")
    assert json.loads(path.read_text())["entries"][0]["value"] == "2"
    entry = await FileStore(path).get("k")
    assert entry is not None and entry.value == "2"


def test_stale_temp_files_of_dead_writers_are_swept(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = tmp_path / f"state.json.tmp-{dead.stdout.strip()}-3"
    live = tmp_path / f"state.json.tmp-{os.getppid()}-1"
    stale.write_text("{half")
    live.write_text("{half")

    async def touch() -> None:
        await FileStore(path).set("k", "v")

    asyncio.run(touch())
    assert not stale.exists()
    assert live.exists()  # a live process may be mid-write; only dead writers' files go


@pytest.mark.parametrize("path", store_files(), ids=lambda p: p.name)
async def test_files_written_by_the_typescript_file_store_load(path: Path) -> None:
    raw = json.loads(await asyncio.to_thread(path.read_text, encoding="utf-8"))
    entries = await FileStore(path).list()
    assert [entry.key for entry in entries] == [row["key"] for row in raw["entries"]]
    assert [entry.value for entry in entries] == [row["value"] for row in raw["entries"]]
    assert [entry.metadata for entry in entries] == [row.get("metadata") for row in raw["entries"]]


async def test_created_at_is_the_same_before_and_after_a_reload(tmp_path: Path) -> None:
    """The file keeps milliseconds: the value handed out at the write is already that one, not
    a microsecond time that a reload (another process, a restart) would not give back."""
    path = tmp_path / "store.json"
    writer = FileStore(path)
    for n in range(20):  # some of these land on a microsecond that is not a whole millisecond
        await writer.set(f"k{n}", "v")
    handed_out = {entry.key: entry.created_at for entry in await writer.list()}
    reloaded = {entry.key: entry.created_at for entry in await FileStore(path).list()}
    assert handed_out == reloaded
    assert all(moment.microsecond % 1000 == 0 for moment in handed_out.values())
