"""Work on a TeamRun to do again later, in a task of its own: starting a run whose start failed
(an API error), and the rest of a crash backoff that a restarted operator finds.

The TeamRun watch's events start runs (``handlers.teamrun_event``); a watch event is never
delivered twice, so what failed is tried again from here. kopf's create and resume handlers
used to do this (a failed handler is retried, a ``TemporaryError`` waits) at the price of one
patch per TeamRun, recording a copy of the spec they had handled in an annotation.

One call at most is pending per run: a newer one replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)
Key = tuple[str, str]  # namespace, name
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0  # kopf's own backoff for a failed handler


class Later:
    def __init__(self) -> None:
        self._pending: dict[Key, asyncio.Task[None]] = {}
        self._owners: dict[Key, str | None] = {}  # the TeamRun uid each pending call is for
        self._failures: dict[Key, int] = {}

    def failed(self, key: Key) -> float:
        """Count a failure of the run's work; the seconds to wait before trying again
        (doubling from 1 s, at most 60 s)."""
        count = self._failures.get(key, 0) + 1
        self._failures[key] = count
        return float(min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2.0 ** min(count - 1, 16)))

    def succeeded(self, key: Key) -> None:
        self._failures.pop(key, None)

    def after(
        self,
        seconds: float,
        key: Key,
        call: Callable[[], Awaitable[None]],
        what: str,
        uid: str | None = None,
    ) -> None:
        """Make ``call`` in ``seconds``, instead of any call pending for the same run (``uid``:
        which TeamRun of that name it is for)."""
        self._drop(key)
        self._owners[key] = uid

        async def wait_then_call() -> None:
            await asyncio.sleep(seconds)
            try:
                await call()
            except Exception:
                log.exception("%s/%s: %s failed", *key, what)

        task = asyncio.create_task(wait_then_call(), name=f"later {key[0]}/{key[1]}: {what}")
        self._pending[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    def pending(self, key: Key) -> bool:
        return key in self._pending

    def cancel(self, key: Key, uid: str | None = None) -> None:
        """The run is gone: nothing left to do for it. With ``uid``, only if the pending call is
        for that TeamRun (a new one of the same name may have its own call pending)."""
        owner = self._owners.get(key)
        if uid is not None and owner is not None and owner != uid:
            return
        self._drop(key)
        self._failures.pop(key, None)

    async def close(self) -> None:
        tasks = list(self._pending.values())
        self._pending.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _drop(self, key: Key) -> None:
        task = self._pending.pop(key, None)
        # A call that schedules its own retry must not cancel itself.
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]
            self._owners.pop(key, None)


LATER = Later()
