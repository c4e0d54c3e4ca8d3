"""Where a run journal is kept in-process or on disk, as the reference keeps it:
``InMemoryRunJournal`` (the most recent events, bounded) and ``JsonlRunJournal`` (one event per
line of a file, each batch one append and ``fsync``)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from oma.errors import OmaError
from oma.journal.jsonl import read_jsonl_journal

DEFAULT_MAX_EVENTS = 10_000


class JournalClosedError(OmaError):
    """An append to a journal after ``close()``."""

    code = "JOURNAL_CLOSED"


class InMemoryRunJournal:
    """The last ``max_events`` events of any runs, in order (older ones are let go)."""

    def __init__(self, *, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)

    @property
    def size(self) -> int:
        return len(self._events)

    async def append(self, events: Sequence[dict[str, Any]]) -> None:
        self._events.extend(orjson.loads(orjson.dumps(list(events))))

    async def read_from(self, seq: int, *, run_id: str | None = None) -> list[dict[str, Any]]:
        return [
            dict(e)
            for e in self._events
            if e["seq"] >= seq and (run_id is None or e["runId"] == run_id)
        ]

    def describe(self, run_id: str) -> dict[str, str] | None:
        return {"kind": "InMemoryRunJournal"}


class JsonlRunJournal:
    """A JSON-lines file: each batch is appended as one write ending in a newline, then
    ``fsync``-ed; the parent directory is made on the first write. One writer per file (it
    takes no lock across processes, as the reference's). A crash can cut only the last line,
    which a read leaves out (``read_jsonl_journal``) and the next append cuts off."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).absolute()
        self._closed = False
        # A thread's lock, held by the write itself: a cancelled append gives up waiting, but
        # its write goes on in its thread, and the next one must not start (and take that
        # half-written line for a torn one) before it ends.
        self._lock = threading.Lock()

    async def append(self, events: Sequence[dict[str, Any]]) -> None:
        if self._closed:
            raise JournalClosedError(f'journal "{self.path}" is closed')
        if not events:
            return
        data = b"".join(orjson.dumps(event) + b"\n" for event in events)
        await asyncio.to_thread(self._write, data)

    def _write(self, data: bytes) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                _drop_torn_line(fd)
                view = memoryview(data)
                while view:  # a write may take fewer bytes than it was given
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)

    async def read_from(self, seq: int, *, run_id: str | None = None) -> list[dict[str, Any]]:
        events = await asyncio.to_thread(read_jsonl_journal, self.path)
        return [e for e in events if e["seq"] >= seq and (run_id is None or e["runId"] == run_id)]

    def describe(self, run_id: str) -> dict[str, str] | None:
        return {"kind": "JsonlRunJournal", "path": str(self.path)}

    async def close(self) -> None:
        self._closed = True


def _drop_torn_line(fd: int) -> None:
    """A last line a crash cut short (no newline after it) is cut off before appending: a
    reader leaves out only a bad *last* line, so appending after it would make the file
    unreadable. It held an event never wholly written, which no reader saw."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    chunk = 1 << 16
    end = size
    while end > 0:
        start = max(0, end - chunk)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            os.ftruncate(fd, start + found + 1)
            return
        end = start
    os.ftruncate(fd, 0)
