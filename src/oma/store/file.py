"""``FileStore``: one JSON document on disk, every mutation written atomically.

Each mutation rewrites the whole file: a sibling temp file ``<file>.tmp-<pid>-<n>`` is written,
fsynced and renamed over the target, then the directory is fsynced, so a reader sees the old or
the new document even across a power loss. Mutations are serialised within the process (one
asyncio lock, one writer thread), which also makes ``compare_and_set`` atomic within the process.
There is no cross-process lock: one writing process at a time.

Unlike the reference, a failed flush leaves the in-memory mirror unchanged, so mirror and disk
never diverge.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from oma.errors import StoreCorruptError, StoreError
from oma.store.base import Entries, MemoryEntry, Metadata, copy_entry, copy_metadata
from oma.store.file_format import decode_state_file, encode_state_file

_TEMP_SUFFIX = re.compile(r"\.tmp-(\d+)-\d+$")
Mutation = Callable[[dict[str, MemoryEntry]], bool]


class FileStore:
    """A durable single-process store in one file (missing file = empty store)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()
        self._entries: dict[str, MemoryEntry] = {}
        self._loaded = False
        self._load_error: StoreError | None = None
        self._lock = asyncio.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oma-filestore")
        self._temp_counter = itertools.count()

    async def get(self, key: str) -> MemoryEntry | None:
        await self._ensure_loaded()
        entry = self._entries.get(key)
        return copy_entry(entry) if entry is not None else None

    async def list(self) -> Entries:
        await self._ensure_loaded()
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
            entries.clear()
            return True

        await self._mutate(wipe)

    async def _mutate(self, mutation: Mutation) -> bool:
        """Apply ``mutation`` to a copy; persist it; only then make it the live state."""
        async with self._lock:
            await self._ensure_loaded()
            candidate = dict(self._entries)
            if not mutation(candidate):
                return False
            payload = encode_state_file(candidate)
            write = asyncio.get_running_loop().run_in_executor(
                self._writer, _write_atomically, self.path, payload, next(self._temp_counter)
            )
            try:
                await _finish_even_if_cancelled(write)
            except OSError as exc:
                raise StoreError(
                    f"cannot write store file {str(self.path)!r}: {exc}; the change was not applied"
                ) from exc
            self._entries = candidate
            return True

    async def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        if self._load_error is not None:
            raise self._load_error
        try:
            data = await asyncio.to_thread(_read_and_sweep, self.path)
            entries = decode_state_file(str(self.path), data) if data is not None else {}
        except StoreError as exc:
            self._load_error = exc
            raise
        except OSError as exc:
            raise StoreError(f"cannot read store file {str(self.path)!r}: {exc}") from exc
        self._entries = entries
        self._loaded = True


async def _finish_even_if_cancelled(write: asyncio.Future[None]) -> None:
    """Wait for a disk write to end; a cancelled caller still waits, so writes never overlap."""
    cancelled = False
    while not write.done():
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            cancelled = cancelled or not write.done()
        except BaseException:  # the write's own error, re-raised below with its traceback
            break
    write.result()
    if cancelled:
        raise asyncio.CancelledError


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
        created_at=existing.created_at if existing is not None else datetime.now(UTC),
        expires_at_turn=expires_at_turn,
    )
    return True


def _read_and_sweep(path: Path) -> bytes | None:
    """Read the state file (``None`` if absent) and remove temp files of dead writers."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    except IsADirectoryError as exc:
        raise StoreCorruptError(str(path), "the path is a directory") from exc
    _sweep_stale_temp_files(path)
    return data


def _sweep_stale_temp_files(path: Path) -> None:
    if not path.parent.is_dir():
        return
    for candidate in path.parent.glob(f"{path.name}.tmp-*"):
        match = _TEMP_SUFFIX.search(candidate.name)
        if match is None or _process_alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            candidate.unlink()


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_atomically(path: Path, payload: bytes, counter: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{counter}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse, which only weakens power-loss
    # durability, never atomicity, so the error is ignored.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
