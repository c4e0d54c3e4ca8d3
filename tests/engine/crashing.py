"""Simulated crashes: a ``BaseException`` that unwinds the run like a kill would.

``CrashingStore`` raises it *instead of* a chosen checkpoint write, so the store keeps exactly
what a process killed at that moment would have left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from oma.store import InMemoryStore
from oma.store.base import Metadata


class SimulatedCrash(BaseException):
    pass


Snapshot = dict[str, Any]


class CrashingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.crash_before: Callable[[Snapshot], bool] | None = None
        self.fail_next_writes = 0
        self.checkpoint_writes: list[Snapshot] = []

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        if key.endswith("/latest"):
            snapshot = json.loads(value)
            if self.crash_before is not None and self.crash_before(snapshot):
                self.crash_before = None
                raise SimulatedCrash(f"killed before writing {key}")
            if self.fail_next_writes:
                self.fail_next_writes -= 1
                raise ConnectionError("store temporarily unavailable")
            self.checkpoint_writes.append(snapshot)
        await super().set(key, value, metadata)


def in_flight(snapshot: Snapshot) -> list[dict[str, Any]]:
    return list(snapshot.get("inFlightTasks", []))


def phase_is(phase: str) -> Callable[[Snapshot], bool]:
    return lambda s: any(t["phase"] == phase for t in in_flight(s))


def call_committed(call_id: str) -> Callable[[Snapshot], bool]:
    def committed(snapshot: Snapshot) -> bool:
        return any(
            p["call"]["id"] == call_id and "commit" in p
            for task in in_flight(snapshot)
            for p in task.get("pendingToolCalls", [])
        )

    return committed
