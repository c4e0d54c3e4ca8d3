"""Leader election for the operator: one process acts, the others stand by (a Lease, as
client-go's ``leaderelection`` does it; the rules are in ``election.rules``).

``acquire()`` returns once this process holds the Lease; ``keep()`` then renews it every retry
period. A leader that cannot renew within the renew deadline stops acting at once: the whole
process exits (``LOST_EXIT``) without any cleanup, since cleanup writes (it releases the runner
pods' finalizers), and the kubelet starts it again as a standby. A watchdog thread enforces the
deadline too, so an event loop that is stuck (a long computation, a hung request) cannot keep
a leader acting past it. ``release()``, after the operator stopped on purpose, clears the holder
so that a standby takes over at its next look instead of waiting out the lease.

The elector has its own API client (its own connection pool): a renewal never queues behind the
operator's own requests (a burst of hundreds of TeamRuns), which would make a busy leader lose.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from oma_operator.election.rules import (
    JITTER,
    Record,
    Seen,
    Timing,
    claim,
    observe,
    read_record,
    released,
    wait_before_taking,
)
from oma_operator.k8s.client import Kube
from oma_operator.k8s.errors import KubeConflict, KubeError, KubeNotFound
from oma_operator.resources.bodies import LeaseBody

log = logging.getLogger(__name__)
DEFAULT_TIMING = Timing()
LOST_EXIT = 3  # the exit status of a leader that lost its lease (the kubelet restarts it)
WATCHDOG_TICK = 0.05  # seconds between the watchdog's looks at the renew deadline
RELEASE_SECONDS = 5.0  # how long a stopping leader tries to release its lease


def now_micro() -> str:
    """Now as a Kubernetes MicroTime (a Lease's times have exactly six fraction digits)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The pod's name (``POD_ID``, which the chart sets), else host name and process id. A
    container restarted in its pod keeps the name and so takes its lease back at once: the
    process that held it is gone."""
    return os.environ.get("POD_ID") or f"{socket.gethostname()}_{os.getpid()}"


def exit_now(reason: str) -> None:
    """Stop acting at once: no cleanup (it would write), the logs flushed, a non-zero exit."""
    log.critical(
        "stopped leading: %s; exiting (status %d) to start again as a standby", reason, LOST_EXIT
    )
    logging.shutdown()
    os._exit(LOST_EXIT)


class LostLease(Exception):
    """Someone else holds the lease (or it is gone): this process no longer leads."""


class LeaderGauge:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.gauge = Gauge(
            "oma_operator_leader",
            "1 while this operator process leads (acts on TeamRuns), 0 while it stands by.",
            registry=registry,
        )


LEADER = LeaderGauge()


class Elector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: Timing = DEFAULT_TIMING,
        on_lost: Callable[[str], None] = exit_now,
        clock: Callable[[], float] = time.monotonic,
        gauge: Gauge | None = None,
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timing = timing
        self._on_lost = on_lost
        self._clock = clock
        self._gauge = gauge if gauge is not None else LEADER.gauge
        self._gauge.set(0)
        self._seen: Seen | None = None
        self._told: str | None = None  # the holder last logged, to log each change once
        self._lease: LeaseBody | None = None  # as this process last wrote it
        self._renewed_at = 0.0  # when the last successful write was sent (monotonic)
        self._lost = threading.Event()
        self._watchdog_stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.leading = False

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- standing by ---------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Return once this process holds the lease (it then leads: call ``keep()``)."""
        log.info("standing by: waiting for lease %s as %s", self.where, self.identity)
        while True:
            try:
                if await self.try_acquire():
                    return
            except (KubeError, httpx.HTTPError) as exc:
                log.warning("lease %s: cannot read or take it: %s", self.where, exc)
            await asyncio.sleep(self.timing.retry_period * random.uniform(1.0, JITTER))

    async def try_acquire(self) -> bool:
        """One look at the lease: take it when it is free (True), else wait (False)."""
        current = await self.kube.get_lease(self.namespace, self.name)
        now = self._clock()
        if current is not None:
            record = read_record(current)
            self._seen = observe(self._seen, record, now)
            self._tell(record)
            held = wait_before_taking(record, self._seen, now, self.timing) > 0
            if record.holder != self.identity and held:
                return False
            if not record.resource_version:
                return False  # never replaced unconditionally (rules._body)
        lease = self._claim(current)
        sent = self._clock()
        try:
            if current is None:
                written = await self.kube.create_lease(self.namespace, lease)
            else:
                written = await self.kube.replace_lease(self.namespace, lease)
        except (KubeConflict, KubeNotFound):  # another candidate wrote first, or it went
            return False
        self._lead(written, sent)
        return True

    def _claim(self, current: LeaseBody | None) -> LeaseBody:
        """The Lease this process writes to take ``current`` or renew it (``rules.claim``)."""
        return claim(
            current,
            name=self.name,
            namespace=self.namespace,
            identity=self.identity,
            timing=self.timing,
            now_iso=now_micro(),
        )

    def _tell(self, record: Record) -> None:
        if record.holder != self._told and record.holder != self.identity:
            self._told = record.holder
            log.info("standing by: lease %s is held by %s", self.where, record.holder or "nobody")

    def _lead(self, written: LeaseBody, sent: float) -> None:
        self._lease, self._renewed_at = written, sent
        self.leading = True
        self._gauge.set(1)
        transitions = (written.get("spec") or {}).get("leaseTransitions", 0)
        log.info(
            "leading: took lease %s as %s (transition %s)", self.where, self.identity, transitions
        )
        self._watchdog_stop.clear()
        self._watchdog = threading.Thread(target=self._watch, name="lease-watchdog", daemon=True)
        self._watchdog.start()

    # -- leading -------------------------------------------------------------------------------
    async def keep(self) -> None:
        """Renew the lease every retry period until cancelled; when it cannot within the renew
        deadline (or someone else holds it), stop acting (``on_lost``) and return."""
        while not self._lost.is_set():
            await asyncio.sleep(self.timing.retry_period)
            while not self._lost.is_set():
                try:
                    await self.renew()
                    break
                except LostLease as exc:
                    self.lose(str(exc))
                    return
                except (KubeError, httpx.HTTPError) as exc:
                    left = self._renewed_at + self.timing.renew_deadline - self._clock()
                    if left <= 0:
                        self.lose(f"no renewal within {self.timing.renew_deadline:g} s ({exc})")
                        return
                    log.warning("lease %s: renewal failed (%.1f s left): %s", self.where, left, exc)
                    await asyncio.sleep(min(self.timing.retry_period / 2, left))

    async def renew(self) -> None:
        """One renewal, replacing the lease as this process last wrote it; a conflict is read
        again, and renewed only if this process still holds it."""
        assert self._lease is not None, "renew() before acquire()"
        current: LeaseBody | None = self._lease
        for _ in range(2):
            if current is None:
                raise LostLease(f"lease {self.where} was deleted")
            holder = read_record(current).holder
            if holder != self.identity:
                raise LostLease(f"lease {self.where} is now held by {holder or 'nobody'}")
            lease = self._claim(current)
            sent = self._clock()
            try:
                written = await self.kube.replace_lease(self.namespace, lease)
            except KubeNotFound:
                current = None
                continue
            except KubeConflict:  # written since: by a thief, or only touched (a label)
                current = await self.kube.get_lease(self.namespace, self.name)
                continue
            if self._lost.is_set():
                return  # too late: acting has stopped already
            self._lease, self._renewed_at = written, sent
            return
        raise KubeConflict(409, f"lease {self.where} keeps changing under its holder")

    def lose(self, reason: str) -> None:
        """Stop acting, once (from the loop or the watchdog thread)."""
        if self._lost.is_set():
            return
        self._lost.set()
        self.leading = False
        self._gauge.set(0)
        self._watchdog_stop.set()
        self._on_lost(reason)

    def _watch(self) -> None:
        """The renew deadline, kept from a thread: it holds while the event loop is stuck."""
        while not self._watchdog_stop.wait(WATCHDOG_TICK):
            late = self._clock() - self._renewed_at - self.timing.renew_deadline
            if late > 0:
                self.lose(f"no renewal within {self.timing.renew_deadline:g} s (watchdog)")
                return

    # -- stopping on purpose -------------------------------------------------------------------
    async def release(self) -> None:
        """After the operator stopped acting: hand the lease over (no holder), best effort."""
        self._watchdog_stop.set()
        if not self.leading or self._lost.is_set() or self._lease is None:
            return
        self.leading = False
        self._gauge.set(0)
        current: LeaseBody | None = self._lease
        try:
            async with asyncio.timeout(RELEASE_SECONDS):
                for _ in range(2):
                    if current is None or read_record(current).holder != self.identity:
                        return  # gone, or someone else's already: nothing to hand over
                    lease = released(
                        current, name=self.name, namespace=self.namespace, now_iso=now_micro()
                    )
                    try:
                        await self.kube.replace_lease(self.namespace, lease)
                    except KubeConflict:  # a renewal in flight when the loop stopped
                        current = await self.kube.get_lease(self.namespace, self.name)
                        continue
                    log.info("released lease %s: a standby takes over at its next look", self.where)
                    return
        except (KubeError, httpx.HTTPError, TimeoutError) as exc:
            log.warning(
                "lease %s not released (a standby takes it when it expires): %s", self.where, exc
            )

    async def aclose(self) -> None:
        self._watchdog_stop.set()
        with contextlib.suppress(Exception):
            await self.kube.aclose()
