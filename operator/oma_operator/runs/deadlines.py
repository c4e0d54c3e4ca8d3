"""One timer per stuck-looking runner pod: when its deadline passes, re-read the pod and, if it
is still stuck, give up on it (see ``watchdog`` for when a pod counts as stuck).

Timers live in memory only. After an operator restart the initial pod listing arms them again,
and deadlines come from the pod's own timestamps, so a restart neither resets nor loses them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime

from oma_operator import runtime
from oma_operator.resources.bodies import PodBody
from oma_operator.runs.attempts import give_up
from oma_operator.runs.missing_secrets import missing_secrets_of
from oma_operator.runs.rules.outcomes import Outcome
from oma_operator.runs.rules.pods import FINALIZER
from oma_operator.runs.rules.watchdog import deadline

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # after an API error while giving up


class DeadlineTimers:
    def __init__(self) -> None:
        self._timers: dict[str, tuple[datetime, asyncio.Task[None]]] = {}

    def arm(self, pod: PodBody) -> None:
        """Called on every event of a live runner pod; (re)arms or leaves its timer."""
        found = deadline(pod)
        uid = pod["metadata"]["uid"]
        current = self._timers.get(uid)
        if found is None or (current is not None and current[0] <= found.due):
            return  # a stale timer re-reads the pod when it fires, so it is harmless
        if current is not None:
            current[1].cancel()
        meta = pod["metadata"]
        task = asyncio.create_task(
            self._run(uid, meta["namespace"], meta["name"], pod), name=f"deadline-{meta['name']}"
        )
        self._timers[uid] = (found.due, task)

    def disarm(self, uid: str) -> None:
        current = self._timers.pop(uid, None)
        if current is not None:
            current[1].cancel()

    async def close(self) -> None:
        for uid in list(self._timers):
            self.disarm(uid)

    async def _run(self, uid: str, namespace: str, name: str, seen: PodBody) -> None:
        known: PodBody | None = seen  # the event's pod: no need to read it again now
        try:
            while True:
                try:
                    pause = await self._check(uid, namespace, name, known)
                except Exception:  # an API error: the pod stays, so try again
                    log.exception("checking runner pod %s/%s failed; retrying", namespace, name)
                    pause = RETRY_SECONDS
                known = None
                if pause is None:
                    return
                await asyncio.sleep(pause)
        finally:
            current = self._timers.get(uid)
            if current is not None and current[1] is asyncio.current_task():
                del self._timers[uid]

    async def _check(
        self, uid: str, namespace: str, name: str, known: PodBody | None
    ) -> float | None:
        """Seconds until the next look, or None when there is nothing left to watch."""
        pod = known if known is not None else await runtime.kube().get_pod(namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return None
        if FINALIZER not in (pod["metadata"].get("finalizers") or []):
            return None  # its outcome is recorded
        found = deadline(pod)
        if found is None:
            return None  # it recovered (started, or its node came back)
        wait = (found.due - datetime.now(UTC)).total_seconds()
        if wait > 0:
            return wait
        await give_up(pod, await _naming_missing_secrets(pod, found.outcome))
        return None


async def _naming_missing_secrets(pod: PodBody, outcome: Outcome) -> Outcome:
    """A start timeout in ``CreateContainerConfigError`` with the Secrets (or keys) the pod
    needs and its namespace lacks added to its message."""
    if outcome.reason != "StartTimeout" or "CreateContainerConfigError" not in outcome.message:
        return outcome
    missing = await missing_secrets_of(pod)
    if not missing:
        return outcome
    return dataclasses.replace(outcome, message=f"{outcome.message} ({missing})")


TIMERS = DeadlineTimers()
