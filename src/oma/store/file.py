"""``FileStore``: one JSON document on disk, every mutation written atomically.

Each mutation rewrites the whole file: a sibling temp file ``<file>.tmp-<pid>-<n>`` is written,
fsynced and renamed over the target, then the directory is fsynced, so a reader sees the old or
the new document even across a power loss.

Mutations hold an exclusive ``flock`` on ``<file>.lock`` and re-read the file first if another
process changed it, so ``compare_and_set`` is atomic across every process that uses a
``FileStore`` on the path (on one machine; not over network filesystems without working
locks), and concurrent writers never lose each other's keys. Reads are served from memory and
refreshed when the file changed on disk. Unlike the reference, a failed write leaves the
in-memory view unchanged, so it never diverges from the disk.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from oma.errors import StoreCorruptError, StoreError
from oma.store.base import Entries, MemoryEntry, Metadata, copy_entry, copy_metadata
from oma.store.capabilities import StoreCapabilities
from oma.store.file_format import decode_state_file, encode_state_file
from oma.store.file_io import finish_even_if_cancelled, read_and_sweep, write_atomically

Mutation = Callable[[dict[str, MemoryEntry]], bool]
Fingerprint = tuple[int, int, int] | None  # (inode, size, mtime_ns) of the file, None if absent


@dataclass
class _Applied:
    changed: bool
    entries: dict[str, MemoryEntry]
    fingerprint: Fingerprint


class FileStore:
    """A durable store in one file (missing file = empty store). No journals: every write
    rewrites the whole file anyway."""

    capabilities = StoreCapabilities(compare_and_set=True, expiry=True, journal=False)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()
        self.lock_path = self.path.with_name(f"{self.path.name}.lock")
        self._entries: dict[str, MemoryEntry] = {}
        self._fingerprint: Fingerprint = None
        self._loaded = False
        self._load_error: StoreError | None = None
        self._lock = asyncio.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oma-filestore")
        self._temp_counter = itertools.count()

    async def get(self, key: str) -> MemoryEntry | None:
        await self._refresh()
        entry = self._entries.get(key)
        return copy_entry(entry) if entry is not None else None

    async def list(self) -> Entries:
        await self._refresh()
        return [copy_entry(entry) for entry in self._entries.values()]

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self._mutate(lambda entries: _put(entries, key, value, metadata, None))

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        await self._mutate(lambda entries: _put(entries, key, value, metadata, expires_at_turn))

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        def swap(entries: dict[str, MemoryEntry]) -> bool:
            current = entries.get(key)
            if (current.value if current is not None else None) != expected:
                return False
            return _put(entries, key, value, metadata, None)

        return await self._mutate(swap)

    async def delete(self, key: str) -> None:
        await self._mutate(lambda entries: entries.pop(key, None) is not None)

    async def clear(self) -> None:
        def wipe(entries: dict[str, MemoryEntry]) -> bool:
            had = bool(entries)
            entries.clear()
            return had

        await self._mutate(wipe)

    async def _mutate(self, mutation: Mutation) -> bool:
        async with self._lock:
            if self._load_error is not None:
                raise self._load_error
            job = asyncio.get_running_loop().run_in_executor(
                self._writer, self._apply_locked, mutation
            )
            try:
                applied = await finish_even_if_cancelled(job)
            except StoreCorruptError as exc:
                self._load_error = exc
                raise
            except OSError as exc:
                raise StoreError(
                    f"cannot write store file {str(self.path)!r}: {exc}; the change was not "
                    "applied. Check that its directory exists and is writable and that the disk "
                    "has space.",
                    transient=_passing(exc),
                ) from exc
            self._entries, self._fingerprint = applied.entries, applied.fingerprint
            self._loaded = True
            return applied.changed

    def _apply_locked(self, mutation: Mutation) -> _Applied:
        """In the writer thread, under the file lock: refresh, mutate a copy, persist it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            base, fingerprint = self._current_state()
            candidate = dict(base)
            if not mutation(candidate):
                return _Applied(False, base, fingerprint)
            write_atomically(self.path, encode_state_file(candidate), next(self._temp_counter))
            return _Applied(True, candidate, _fingerprint(self.path))

    def _current_state(self) -> tuple[dict[str, MemoryEntry], Fingerprint]:
        fingerprint = _fingerprint(self.path)
        if self._loaded and fingerprint == self._fingerprint:
            return self._entries, fingerprint
        data = read_and_sweep(self.path)
        entries = decode_state_file(str(self.path), data) if data is not None else {}
        return entries, fingerprint

    async def _refresh(self) -> None:
        """Load on first use, and again whenever another process changed the file."""
        if self._load_error is not None:
            raise self._load_error
        if self._loaded and _fingerprint(self.path) == self._fingerprint:
            return
        async with self._lock:
            try:
                self._entries, self._fingerprint = await asyncio.to_thread(self._current_state)
            except StoreCorruptError as exc:
                self._load_error = exc
                raise
            except OSError as exc:
                raise StoreError(
                    f"cannot read store file {str(self.path)!r}: {exc}. Check that the file and "
                    "its directory are readable by this user.",
                    transient=_passing(exc),
                ) from exc
            self._loaded = True


# OS errors that pass by themselves (a busy or interrupted call, a full lock table); anything
# else (permissions, a missing directory, a full disk) needs someone to act first.
_PASSING_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ENOLCK}
)


def _passing(exc: OSError) -> bool:
    return exc.errno in _PASSING_ERRNOS


def _fingerprint(path: Path) -> Fingerprint:
    try:
        stat = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _put(
    entries: dict[str, MemoryEntry],
    key: str,
    value: str,
    metadata: Metadata | None,
    expires_at_turn: int | None,
) -> bool:
    existing = entries.get(key)
    entries[key] = MemoryEntry(
        key=key,
        value=value,
        metadata=copy_metadata(metadata),
        created_at=existing.created_at if existing is not None else _now_as_persisted(),
        expires_at_turn=expires_at_turn,
    )
    return True


def _now_as_persisted() -> datetime:
    """Now, to the millisecond: the file keeps ``created_at`` in milliseconds (the format the
    TypeScript implementation writes), so an entry read back has the value it was handed out
    with."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
