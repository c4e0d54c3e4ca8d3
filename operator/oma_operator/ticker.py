"""Periodic work on TeamRuns in a given phase, without kopf timers.

kopf puts its finalizer on every object that has a timer, so deleting a TeamRun (or its
namespace) would hang whenever the operator is down. Here the TeamRun watch feeds an in-memory
view instead, and one loop per kind of work visits the TeamRuns in its phase, a few at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable

from oma_operator.resources.bodies import TeamRunBody

log = logging.getLogger(__name__)
Work = Callable[[TeamRunBody], Awaitable[None]]
OnError = Callable[[TeamRunBody, str, Exception], Awaitable[None]]


VISIT_SECONDS = 20.0  # one visit's limit: a store that accepts and never answers ends here
PER_NAMESPACE = 2  # visits of one namespace (tenant) at once


class Ticker:
    """Each kind of work visits its TeamRuns every ``seconds``; a visit of a run starts only
    once the run's previous one has ended, and lasts at most ``VISIT_SECONDS``. Visits of one
    namespace share ``PER_NAMESPACE`` places, out of ``concurrency`` in all: a tenant whose
    store is slow, or never answers, uses its own places, and every other tenant's runs are
    still visited on time (one round does not wait for its slowest visit)."""

    def __init__(
        self,
        concurrency: int = 64,
        per_namespace: int = PER_NAMESPACE,
        visit_seconds: float = VISIT_SECONDS,
    ) -> None:
        self._runs: dict[tuple[str, str], TeamRunBody] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._visits: set[asyncio.Task[None]] = set()
        self._phases: set[str] = set()  # the phases some work visits
        self._concurrency = concurrency
        self._per_namespace = per_namespace
        self._visit_seconds = visit_seconds
        # Set by the operator: how a TeamRun hears of its periodic work failing, then working.
        self.on_error: OnError | None = None
        self.on_success: Work | None = None

    def seen(self, body: TeamRunBody, event_type: str | None) -> None:
        """Feed every TeamRun watch event (the initial listing included)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        phase = (body.get("status") or {}).get("phase")
        # Only runs in a phase some work visits are kept: thousands of finished ones are not.
        if event_type == "DELETED" or meta.get("deletionTimestamp") or phase not in self._phases:
            self._runs.pop(key, None)
        else:
            self._runs[key] = body

    def in_phase(self, phase: str) -> list[TeamRunBody]:
        return [b for b in self._runs.values() if (b.get("status") or {}).get("phase") == phase]

    def every(self, seconds: float, phase: str, work: Work, name: str) -> None:
        self._phases.add(phase)
        task = asyncio.create_task(self._loop(seconds, phase, work, name), name=name)
        self._tasks.append(task)

    async def close(self) -> None:
        tasks = [*self._tasks, *self._visits]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._visits.clear()

    async def _loop(self, seconds: float, phase: str, work: Work, name: str) -> None:
        gate = asyncio.Semaphore(self._concurrency)
        tenants: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(self._per_namespace)
        )
        visiting: set[tuple[str, str]] = set()

        async def visit(key: tuple[str, str], body: TeamRunBody) -> None:
            try:
                async with tenants[key[0]], gate:
                    await self._visit(body, work, name)
            finally:
                visiting.discard(key)

        while True:
            for body in self.in_phase(phase):
                meta = body.get("metadata") or {}
                key = (str(meta.get("namespace")), str(meta.get("name")))
                if key in visiting:
                    continue  # its last visit is still under way (a slow store)
                visiting.add(key)
                task = asyncio.create_task(visit(key, body), name=f"{name}-{key[0]}/{key[1]}")
                self._visits.add(task)
                task.add_done_callback(self._visits.discard)
            await asyncio.sleep(seconds)

    async def _visit(self, body: TeamRunBody, work: Work, name: str) -> None:
        meta = body.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            async with asyncio.timeout(self._visit_seconds):
                await work(body)
        except TimeoutError:
            problem: Exception = TimeoutError(
                f"it did not finish within {self._visit_seconds:.0f} s (is the run's store "
                "answering?); tried again in the next round"
            )
            log.warning("%s: periodic work %s: %s", where, name, problem)
        except Exception as exc:  # one TeamRun's trouble must not stop the others'
            problem = exc
            log.exception("%s: periodic work failed", where)
        else:
            if self.on_success is not None:
                await self.on_success(body)
            return
        if self.on_error is not None:
            await self.on_error(body, f"periodic work '{name}'", problem)


TICKER = Ticker()
