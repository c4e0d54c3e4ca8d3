"""Periodic work on TeamRuns in a given phase, without kopf timers.

kopf puts its finalizer on every object that has a timer, so deleting a TeamRun (or its
namespace) would hang whenever the operator is down. Here the TeamRun watch feeds an in-memory
view instead, and one loop per kind of work visits the TeamRuns in its phase, a few at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)
Work = Callable[[dict[str, Any]], Awaitable[None]]
OnError = Callable[[dict[str, Any], str, Exception], Awaitable[None]]


class Ticker:
    def __init__(self, concurrency: int = 8) -> None:
        self._runs: dict[tuple[str, str], dict[str, Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._phases: set[str] = set()  # the phases some work visits
        self._concurrency = concurrency
        # Set by the operator: how a TeamRun hears of its periodic work failing, then working.
        self.on_error: OnError | None = None
        self.on_success: Work | None = None

    def seen(self, body: dict[str, Any], event_type: str | None) -> None:
        """Feed every TeamRun watch event (the initial listing included)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        phase = (body.get("status") or {}).get("phase")
        # Only runs in a phase some work visits are kept: thousands of finished ones are not.
        if event_type == "DELETED" or meta.get("deletionTimestamp") or phase not in self._phases:
            self._runs.pop(key, None)
        else:
            self._runs[key] = body

    def in_phase(self, phase: str) -> list[dict[str, Any]]:
        return [b for b in self._runs.values() if (b.get("status") or {}).get("phase") == phase]

    def every(self, seconds: float, phase: str, work: Work, name: str) -> None:
        self._phases.add(phase)
        task = asyncio.create_task(self._loop(seconds, phase, work, name), name=name)
        self._tasks.append(task)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _loop(self, seconds: float, phase: str, work: Work, name: str) -> None:
        gate = asyncio.Semaphore(self._concurrency)

        async def visit(body: dict[str, Any]) -> None:
            async with gate:
                try:
                    await work(body)
                except Exception as exc:  # one TeamRun's trouble must not stop the others'
                    meta = body.get("metadata") or {}
                    log.exception(
                        "%s/%s: periodic work failed", meta.get("namespace"), meta.get("name")
                    )
                    if self.on_error is not None:
                        await self.on_error(body, f"periodic work '{name}'", exc)
                    return
                if self.on_success is not None:
                    await self.on_success(body)

        while True:
            await asyncio.gather(*(visit(body) for body in self.in_phase(phase)))
            await asyncio.sleep(seconds)


TICKER = Ticker()
