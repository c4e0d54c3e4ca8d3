"""The operator's view of who holds a slot, and the loop that starts queued TeamRuns.

What holds a slot is read from kopf's index of TeamRuns (``handlers.teamrun_slots``): kopf runs
no handler before the index holds every TeamRun of the initial listing, so a restarted operator
counts the runs already running before it starts another. The watch lags this process's own
writes, so a run it has just started is held as a *reservation* until the watch shows it
running (or final, or gone): a late event from before the start (``Queued``,
``AwaitingApproval``) cannot free its slot. Reservations are made and weighed without an
``await`` in between, so two handlers never take the same last slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.phases import FINAL_PHASES
from oma_operator.runs.rules.concurrency import Slot, admit, slot_of, verdict
from oma_operator.settings.limits import Limits

log = logging.getLogger(__name__)
INDEX_KEY = "teamruns"  # the one key of the index: every TeamRun's slot is under it
SlotIndex = Mapping[str, Iterable[Slot]]
Start = Callable[[Slot], Awaitable[None]]
FALLBACK_SECONDS = 5.0  # a dispatch at least this often, whatever the watch says


class RunQueue:
    def __init__(self) -> None:
        self.limits = Limits()
        self._index: SlotIndex | None = None
        self._reserved: dict[str, Slot] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._starting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # starts under way (kept from the GC)

    @property
    def active(self) -> bool:
        return self.limits.active

    def configure(self, limits: Limits) -> None:
        self.limits = limits

    def attach(self, index: SlotIndex) -> None:
        self._index = index

    # -- the view ----------------------------------------------------------------------------
    def _slots(self) -> dict[str, Slot]:
        found = {s.uid: s for s in (self._index or {}).get(INDEX_KEY, ())}
        for uid, reserved in list(self._reserved.items()):
            seen = found.get(uid)
            # Only a start moves status.attempt to the reserved one (a queued run keeps its last).
            started = seen is not None and seen.attempt >= reserved.attempt
            if seen is None or started or seen.phase in FINAL_PHASES:
                del self._reserved[uid]  # the watch caught up (or it ended, or is gone)
            else:
                found[uid] = reserved
        return found

    def holders(self) -> list[Slot]:
        return [s for s in self._slots().values() if s.holding]

    def queued(self) -> list[Slot]:
        return [s for s in self._slots().values() if s.phase == "Queued"]

    # -- reservations ------------------------------------------------------------------------
    def reserve(self, teamrun: TeamRunBody, attempt: int) -> str | None:
        """Take a slot for ``teamrun`` to start ``attempt`` in: None if taken, else why it
        waits. Always None without limits."""
        if not self.active:
            return None
        candidate = slot_of(teamrun)
        slots = self._slots()
        held = slots.get(candidate.uid)
        if held is not None and held.holding:
            return None  # it holds one already (a repeated event, a resumed handler)
        others = [s for s in slots.values() if s.uid != candidate.uid]
        reason = verdict(
            candidate,
            [s for s in others if s.phase == "Queued"],
            [s for s in others if s.holding],
            self.limits,
        )
        if reason is None:
            self._hold(candidate, attempt)
        return reason

    def _hold(self, slot: Slot, attempt: int) -> None:
        self._reserved[slot.uid] = Slot(
            slot.uid, slot.namespace, slot.name, slot.providers, "Running", attempt, slot.queued_at
        )

    def release(self, uid: str) -> None:
        """Give back a reservation whose start did not happen (the TeamRun changed meanwhile)."""
        if self._reserved.pop(uid, None) is not None:
            self.kick()

    # -- the loop ----------------------------------------------------------------------------
    def kick(self) -> None:
        """Something may have freed a slot: dispatch soon."""
        self._wake.set()

    def start(self, start: Start) -> None:
        if self.active and self._task is None:
            self._task = asyncio.create_task(self._loop(start), name="run-queue")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def due(self) -> list[Slot]:
        """Reserve a slot for each queued run that may start now; the runs to start."""
        slots = self._slots()
        waiting = [s for s in slots.values() if s.phase == "Queued" and s.uid not in self._starting]
        holders = [s for s in slots.values() if s.holding]
        chosen = admit(waiting, holders, self.limits)
        for slot in chosen:
            self._hold(slot, slot.attempt + 1)
        return chosen

    async def _loop(self, start: Start) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FALLBACK_SECONDS)
            self._wake.clear()
            for slot in self.due():
                self._starting.add(slot.uid)
                task = asyncio.create_task(self._start(start, slot), name=f"start {slot.name}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _start(self, start: Start, slot: Slot) -> None:
        try:
            await start(slot)
        except Exception:
            log.exception("%s/%s: starting it from the queue failed", slot.namespace, slot.name)
            self.release(slot.uid)
        finally:
            self._starting.discard(slot.uid)


RUN_QUEUE = RunQueue()
