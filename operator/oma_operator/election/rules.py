"""Who may lead: the pure rules of leader election over a ``coordination.k8s.io/v1`` Lease, as
client-go's ``leaderelection`` has them (pure: no I/O, no clock of its own).

- A candidate judges a Lease expired by its own monotonic clock: the lease is free once it has
  seen the same record for the lease's duration (``Seen``). Wall clocks of two machines are
  never compared, so ``renewTime``/``acquireTime`` are written for people and never believed.
- Taking over and renewing are replacements carrying the ``resourceVersion`` read: of two
  candidates only one write succeeds, the other gets 409 and waits again.
- A Lease is writable by whoever the RBAC lets write it, so its spec is untrusted input: a
  garbage, negative, zero or huge duration, a missing holder or a forged time never crash a
  candidate, and never make it take a lease sooner than its own configured duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oma_operator.resources.bodies import LeaseBody, LeaseSpec, ObjectMeta

MAX_LEASE_SECONDS = 300  # what a Lease may claim, and what the elector may be configured with
JITTER = 1.2  # client-go's JitterFactor: retries wait retry_period x [1, 1.2)
RELEASED_SECONDS = 1  # the duration a released Lease says (its holder is empty anyway)
MAX_TRANSITIONS = 2**31 - 1  # leaseTransitions is an int32


class TimingError(ValueError):
    """The configured durations cannot make a safe election."""


@dataclass(frozen=True)
class Timing:
    """client-go's ``LeaseDuration``, ``RenewDeadline``, ``RetryPeriod`` (seconds).

    A leader that has not renewed within ``renew_deadline`` of its last renewal stops acting;
    a candidate takes over ``lease_seconds`` after it last saw the record change. The gap
    between the two is what keeps the old leader's last acts before the new leader's first."""

    lease_seconds: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period * JITTER < self.renew_deadline:
            raise TimingError(
                f"the retry period ({self.retry_period:g} s) times {JITTER} must be positive "
                f"and under the renew deadline ({self.renew_deadline:g} s)"
            )
        if not self.renew_deadline < self.lease_seconds:
            raise TimingError(
                f"the renew deadline ({self.renew_deadline:g} s) must be under the lease "
                f"duration ({self.lease_seconds:g} s)"
            )
        if self.lease_seconds > MAX_LEASE_SECONDS or self.lease_seconds != int(self.lease_seconds):
            raise TimingError(
                f"the lease duration must be whole seconds, at most {MAX_LEASE_SECONDS} "
                f"(got {self.lease_seconds:g})"
            )


@dataclass(frozen=True)
class Record:
    """What a Lease says, checked: ``holder`` is empty when nobody holds it (or its holder is
    not a string); ``lease_seconds`` is None when the duration is missing or not believable."""

    holder: str
    lease_seconds: int | None
    transitions: int
    resource_version: str
    # Every field a write can change: a different fingerprint is a changed record.
    fingerprint: tuple[object, ...]


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def read_record(body: LeaseBody | None) -> Record:
    """The Lease ``body`` (None: there is none) as a ``Record``; never raises. Its view is
    typed, its values are not trusted: anyone with write access to the Lease wrote them."""
    raw: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    meta = _mapping(raw.get("metadata"))
    spec = _mapping(raw.get("spec"))
    holder = spec.get("holderIdentity")
    duration = _whole(spec.get("leaseDurationSeconds"))
    transitions = _whole(spec.get("leaseTransitions"))
    version = meta.get("resourceVersion")
    return Record(
        holder=holder if isinstance(holder, str) else "",
        lease_seconds=duration
        if duration is not None and 0 < duration <= MAX_LEASE_SECONDS
        else None,
        transitions=transitions if transitions is not None and transitions >= 0 else 0,
        resource_version=version if isinstance(version, str) else "",
        fingerprint=(
            version if isinstance(version, str) else None,
            *(repr(spec.get(key)) for key in sorted(LeaseSpec.__annotations__)),
        ),
    )


@dataclass(frozen=True)
class Seen:
    """When (this process's monotonic clock) the record with ``fingerprint`` was first seen."""

    fingerprint: tuple[object, ...]
    at: float


def observe(previous: Seen | None, record: Record, now: float) -> Seen:
    """The record as seen at ``now``: the time moves only when the record changed."""
    if previous is not None and previous.fingerprint == record.fingerprint:
        return previous
    return Seen(record.fingerprint, now)


def wait_before_taking(record: Record, seen: Seen, now: float, timing: Timing) -> float:
    """Seconds before ``record`` may be taken over (0: now). A lease with no holder is free; a
    held one expires ``lease`` seconds after its record last changed, ``lease`` being the
    Lease's own duration but never less than ours (a forged short or missing duration cannot
    make us take it early) nor more than ``MAX_LEASE_SECONDS`` (a huge one cannot keep us
    waiting for ever: no configured elector holds a lease longer)."""
    if not record.holder:
        return 0.0
    claimed = record.lease_seconds if record.lease_seconds is not None else 0
    lease = min(max(float(claimed), timing.lease_seconds), float(MAX_LEASE_SECONDS))
    return max(0.0, seen.at + lease - now)


def claim(
    current: LeaseBody | None,
    *,
    name: str,
    namespace: str,
    identity: str,
    timing: Timing,
    now_iso: str,
) -> LeaseBody:
    """The Lease to write to take ``current`` (None: to create it) or, held by ``identity``
    already, to renew it: the read ``resourceVersion`` kept as the write's precondition,
    ``leaseTransitions`` counted up when the holder changes."""
    record = read_record(current)
    taking = record.holder != identity
    spec: LeaseSpec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": int(timing.lease_seconds),
        "acquireTime": now_iso,
        "renewTime": now_iso,
        "leaseTransitions": min(
            record.transitions + (1 if taking and current else 0), MAX_TRANSITIONS
        ),
    }
    if not taking:
        acquired = ((current or {}).get("spec") or {}).get("acquireTime")
        if isinstance(acquired, str):
            spec["acquireTime"] = acquired
    return _body(current, name, namespace, spec)


def released(current: LeaseBody, *, name: str, namespace: str, now_iso: str) -> LeaseBody:
    """The Lease to write when its leader stops acting on purpose: no holder, so a standby
    takes it at its next look (client-go's ``ReleaseOnCancel``)."""
    record = read_record(current)
    spec: LeaseSpec = {
        "holderIdentity": "",
        "leaseDurationSeconds": RELEASED_SECONDS,
        "renewTime": now_iso,
        "leaseTransitions": record.transitions,
    }
    return _body(current, name, namespace, spec)


def _body(current: LeaseBody | None, name: str, namespace: str, spec: LeaseSpec) -> LeaseBody:
    metadata: ObjectMeta = {"name": name, "namespace": namespace}
    if current is not None:
        meta = current.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not isinstance(version, str) or not version:
            # Without it a replacement is unconditional: it would overwrite whatever is there.
            raise ValueError("a Lease read without a resourceVersion cannot be replaced safely")
        metadata["resourceVersion"] = version
        for key in ("labels", "annotations"):  # kept: a replacement would drop them
            if isinstance(meta.get(key), dict):
                metadata[key] = meta[key]  # type: ignore[literal-required,unused-ignore]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }
