"""Disk operations of ``FileStore``: atomic replace, directory fsync, crash-debris sweeping."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path
from typing import TypeVar

from oma.errors import StoreCorruptError

T = TypeVar("T")
_TEMP_SUFFIX = re.compile(r"\.tmp-(\d+)-\d+$")


async def finish_even_if_cancelled(job: asyncio.Future[T]) -> T:
    """Wait for a disk write to end; a cancelled caller still waits, so writes never overlap."""
    cancelled = False
    while not job.done():
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            cancelled = cancelled or not job.done()
        except BaseException:  # the job's own error, re-raised below with its traceback
            break
    result = job.result()
    if cancelled:
        raise asyncio.CancelledError
    return result


def read_and_sweep(path: Path) -> bytes | None:
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


def write_atomically(path: Path, payload: bytes, counter: int) -> None:
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
