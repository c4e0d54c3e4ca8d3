"""Fault injection for crash-consistency tests: SIGKILL this process at a chosen store write.

Off unless ``OMA_FAULT_KILL_AT`` or ``OMA_FAULT_LOG`` is set (``oma run`` and the Kubernetes
runner read them through ``with_faults_from_env``); nothing else in oma uses this module.

- ``OMA_FAULT_KILL_AT=<n>:before`` kills the process just before its n-th store write (set,
  compare-and-set, set-with-expiry, delete, clear; counted from 1 per process), so the store
  never sees it; ``<n>:after`` kills it just after the write returned.
- ``OMA_FAULT_LOG=<path>`` appends one JSON line per write (``{"n", "op", "key"}``), which is
  how a harness enumerates the boundaries of an uninterrupted run before killing at each.

Every durable boundary of a run (each checkpoint save, each tool commit, each approval row,
each shared-memory write) is a store write, so "every write, before and after" is every boundary.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from oma.store.base import Entries, MemoryEntry, MemoryStore, Metadata

KILL_ENV = "OMA_FAULT_KILL_AT"
LOG_ENV = "OMA_FAULT_LOG"
_WRAPPED_OPTIONAL = ("compare_and_set", "set_with_expiry")


class FaultPlanError(ValueError):
    pass


def parse_kill_at(text: str) -> tuple[int, str]:
    number, _, when = text.partition(":")
    when = when or "before"
    if not number.isdigit() or int(number) < 1 or when not in ("before", "after"):
        raise FaultPlanError(f"{KILL_ENV}={text!r}: expected '<n>:before' or '<n>:after', n >= 1")
    return int(number), when


class FaultInjectingStore:
    """Wraps a store; counts its writes, logs them, and kills the process at the planned one."""

    def __init__(self, inner: MemoryStore, kill_at: tuple[int, str] | None, log: str | None):
        self.inner = inner
        self.kill_at = kill_at
        self.log = log
        self.writes = 0

    async def _write(self, op: str, key: str | None, call: Any) -> Any:
        self.writes += 1
        number = self.writes  # concurrent writes overlap: each keeps its own number
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as handle:  # noqa: ASYNC230
                handle.write(json.dumps({"n": number, "op": op, "key": key}) + "\n")
        self._maybe_kill(number, "before")
        result = await call
        self._maybe_kill(number, "after")
        return result

    def _maybe_kill(self, number: int, moment: str) -> None:
        if self.kill_at == (number, moment):
            os.kill(os.getpid(), signal.SIGKILL)

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
        # Optional capabilities exist on the wrapper exactly when the inner store has them.
        attribute = getattr(self.inner, name)
        if name not in _WRAPPED_OPTIONAL:
            return attribute

        async def wrapped(key: str, *args: Any, **kwargs: Any) -> Any:
            return await self._write(name, key, attribute(key, *args, **kwargs))

        return wrapped


def with_faults_from_env(store: MemoryStore) -> MemoryStore:
    kill = os.environ.get(KILL_ENV)
    log = os.environ.get(LOG_ENV)
    if not kill and not log:
        return store
    return FaultInjectingStore(store, parse_kill_at(kill) if kill else None, log or None)
