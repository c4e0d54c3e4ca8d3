"""What makes a ``FileStore`` write survive a power loss, in the order it must happen: the
whole new file is flushed to disk (``fsync`` of the temporary file) before it is renamed over
the old one, and the directory is flushed after the rename. A crash of the process cannot show
the difference (the page cache survives it: tests/stores/test_file_store_crash.py), so the
system calls are recorded as they are made (each still performed) and their order checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from oma.store import FileStore

Call = tuple[str, str, int]


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    calls: list[Call] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd: int) -> None:
        where = os.readlink(f"/proc/self/fd/{fd}")
        calls.append(("fsync", where, os.fstat(fd).st_size))
        fsync(fd)

    def recorded_replace(source: Any, target: Any) -> None:
        calls.append(("replace", f"{os.fspath(source)} -> {os.fspath(target)}", 0))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    return calls


@pytest.mark.parametrize("writes", [1, 3])
async def test_each_write_is_on_disk_before_its_rename_and_the_rename_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: int
) -> None:
    path = tmp_path / "store.json"
    store = FileStore(path)
    calls = _recording(monkeypatch)
    for n in range(writes):
        await store.set(f"k{n}", "v" * 5000)
    renames = [i for i, call in enumerate(calls) if call[0] == "replace"]
    assert len(renames) == writes
    for index in renames:
        source = calls[index][1].split(" -> ")[0]
        assert calls[index][1].endswith(f" -> {path}")
        before = [c for c in calls[:index] if c[0] == "fsync" and c[1] == source]
        assert before, f"the new file {source} was renamed into place before any fsync of it"
        if index == renames[-1]:  # what was flushed is the whole file now in place
            assert before[-1][2] == os.stat(path).st_size
        after = calls[index + 1 :]
        directory = next((c for c in after if c[0] == "fsync"), None)
        assert directory is not None and directory[1] == str(tmp_path), calls
    assert len(await FileStore(path).list()) == writes
