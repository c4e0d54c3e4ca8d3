"""Fault injection for crash-consistency tests: SIGKILL this process at a chosen store write.

Off unless ``OMA_FAULT_KILL_AT`` or ``OMA_FAULT_LOG`` is set (``oma run`` and the Kubernetes
runner read them through ``with_faults_from_env``); nothing else in oma uses this module.

- ``OMA_FAULT_KILL_AT=<n>:before`` kills the process just before its n-th store write (set,
  compare-and-set, set-with-expiry, journal write, delete, clear; counted from 1 per process),
  so the store never sees it; ``<n>:after`` kills it just after the write returned.
- ``OMA_FAULT_LOG=<path>`` appends one JSON line per write (``{"n", "op", "key"}``), which is
  how a harness enumerates the boundaries of an uninterrupted run before killing at each.
- ``OMA_FAULT_PAUSE_AT=<n>:before|after`` with ``OMA_FAULT_PAUSE_FILE=<path>`` holds the process
  at that moment instead of killing it: it creates ``<path>`` and waits (without blocking its
  event loop) until someone deletes it. A harness restarts a store server there, or lets a
  second attempt of the same run go ahead.

Every durable boundary of a run (each checkpoint save, each tool commit, each approval row,
each shared-memory write) is a store write, so "every write, before and after" is every boundary.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from oma.store.base import Entries, MemoryEntry, MemoryStore, Metadata
from oma.store.capabilities import StoreCapabilities, capabilities_of

KILL_ENV = "OMA_FAULT_KILL_AT"
LOG_ENV = "OMA_FAULT_LOG"
PAUSE_ENV = "OMA_FAULT_PAUSE_AT"
PAUSE_FILE_ENV = "OMA_FAULT_PAUSE_FILE"
_WRAPPED_OPTIONAL = ("compare_and_set", "set_with_expiry", "journal_write")


class FaultPlanError(ValueError):
    pass


def parse_kill_at(text: str, variable: str = KILL_ENV) -> tuple[int, str]:
    number, _, when = text.partition(":")
    when = when or "before"
    if not number.isdigit() or int(number) < 1 or when not in ("before", "after"):
        raise FaultPlanError(f"{variable}={text!r}: expected '<n>:before' or '<n>:after', n >= 1")
    return int(number), when


class FaultInjectingStore:
    """Wraps a store; counts its writes, logs them, and kills the process at the planned one."""

    def __init__(
        self,
        inner: MemoryStore,
        kill_at: tuple[int, str] | None,
        log: str | None,
        pause_at: tuple[int, str] | None = None,
        pause_file: str | None = None,
    ):
        self.inner = inner
        self.kill_at = kill_at
        self.log = log
        self.pause_at = pause_at if pause_file else None
        self.pause_file = Path(pause_file) if pause_file else None
        self.writes = 0

    async def _write(self, op: str, key: str | None, call: Any) -> Any:
        self.writes += 1
        number = self.writes  # concurrent writes overlap: each keeps its own number
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as handle:  # noqa: ASYNC230
                handle.write(json.dumps({"n": number, "op": op, "key": key}) + "\n")
        self._maybe_kill(number, "before")
        await self._maybe_pause(number, "before")
        result = await call
        self._maybe_kill(number, "after")
        await self._maybe_pause(number, "after")
        return result

    async def _maybe_pause(self, number: int, moment: str) -> None:
        if self.pause_at != (number, moment) or self.pause_file is None:
            return
        self.pause_file.touch()
        while self.pause_file.exists():  # noqa: ASYNC110 - a file is the only channel here
            await asyncio.sleep(0.01)

    def _maybe_kill(self, number: int, moment: str) -> None:
        if self.kill_at == (number, moment):
            os.kill(os.getpid(), signal.SIGKILL)

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's: every optional method is passed on (and counted as a write)."""
        return capabilities_of(self.inner)

    async def get(self, key: str) -> MemoryEntry | None:
        return await self.inner.get(key)

    async def list(self) -> Entries:
        return await self.inner.list()

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self._write("set", key, self.inner.set(key, value, metadata))

    async def delete(self, key: str) -> None:
        await self._write("delete", key, self.inner.delete(key))

    async def clear(self) -> None:
        await self._write("clear", None, self.inner.clear())

    def __getattr__(self, name: str) -> Any:
        # Optional methods exist on the wrapper exactly when the inner store has them; what it
        # declares is the inner store's declaration (``capabilities``).
        attribute = getattr(self.inner, name)
        if name not in _WRAPPED_OPTIONAL:
            return attribute

        async def wrapped(key: str, *args: Any, **kwargs: Any) -> Any:
            return await self._write(name, key, attribute(key, *args, **kwargs))

        return wrapped


def with_faults_from_env(store: MemoryStore) -> MemoryStore:
    kill = os.environ.get(KILL_ENV)
    log = os.environ.get(LOG_ENV)
    pause = os.environ.get(PAUSE_ENV)
    pause_file = os.environ.get(PAUSE_FILE_ENV)
    if not kill and not log and not (pause and pause_file):
        return store
    return FaultInjectingStore(
        store,
        parse_kill_at(kill) if kill else None,
        log or None,
        parse_kill_at(pause, PAUSE_ENV) if pause and pause_file else None,
        pause_file or None,
    )
