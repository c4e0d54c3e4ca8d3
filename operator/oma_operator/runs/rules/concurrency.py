"""Concurrency limits (pure): which queued TeamRuns start under the limits the operator was
given (``settings.limits``).

A TeamRun holds a slot while its phase is ``Running`` (an attempt's pod exists or is about to, a
disruption or crash backoff between two attempts included). It holds none while ``Queued``,
``AwaitingApproval`` (a person may take days) or final. A run counts once against its namespace
and once against each model provider its agents (and coordinator) use: provider rate limits are
what people hit, and they span namespaces.

Queued runs start first in, first out (a new run by its creation, a run resumed after approvals
by ``status.queuedAt``), best effort: a run blocked by one provider does not hold back a
younger one that needs another provider.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oma.timeutil import format_iso, parse_iso
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.settings.limits import Limits

HOLDING_PHASES = frozenset({"Running"})


@dataclass(frozen=True)
class Slot:
    """What admission needs of one TeamRun, as the TeamRun watch last showed it."""

    uid: str
    namespace: str
    name: str
    providers: frozenset[str]
    phase: str | None
    attempt: int
    queued_at: str  # RFC 3339 in UTC: sorts as text

    @property
    def holding(self) -> bool:
        return self.phase in HOLDING_PHASES

    @property
    def order(self) -> tuple[str, str, str]:
        return (self.queued_at, self.namespace, self.name)


def frees_slot(event_type: str | None, teamrun: TeamRunBody) -> bool:
    """Whether a TeamRun watch event may have freed a slot, so that the queue should weigh its
    runs now: the run was deleted, or is in a phase that holds none other than ``Queued``
    (ended, waiting for a person). A run queued or running frees nothing (a queued one was
    weighed when it was queued); the queue also weighs its runs every few seconds anyway."""
    if event_type == "DELETED":
        return True
    phase = (teamrun.get("status") or {}).get("phase")
    return phase is not None and phase != "Queued" and phase not in HOLDING_PHASES


def slot_of(teamrun: TeamRunBody) -> Slot:
    """A TeamRun's slot view from its raw object (no validation: a run whose spec is invalid
    is refused before it can queue; unknown providers are counted under their name)."""
    meta, status = teamrun.get("metadata") or {}, teamrun.get("status") or {}
    spec = teamrun.get("spec") or {}
    agents = list((spec.get("team") or {}).get("agents") or [])
    if isinstance(spec.get("coordinator"), Mapping):
        agents.append(spec["coordinator"])
    providers = {
        agent["model"]["provider"]
        for agent in agents
        if isinstance(agent, Mapping)
        and isinstance(agent.get("model"), Mapping)
        and isinstance(agent["model"].get("provider"), str)
    }
    attempt = int(status.get("attempt") or 0)
    return Slot(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        providers=frozenset(providers),
        phase=status.get("phase"),
        attempt=attempt,
        # A new run's place is its creation; a run resumed after approvals queues anew.
        queued_at=_instant(status.get("queuedAt") if attempt else meta.get("creationTimestamp")),
    )


def _instant(value: Any) -> str:
    """One text form for queuedAt (milliseconds) and creationTimestamp (seconds), so they sort."""
    moment = parse_iso(str(value or ""))
    return format_iso(moment) if moment is not None else ""


@dataclass
class Usage:
    """Slots held, by namespace and by provider."""

    namespaces: Counter[str] = field(default_factory=Counter)
    providers: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, holders: Iterable[Slot]) -> Usage:
        usage = cls()
        for slot in holders:
            usage.take(slot)
        return usage

    def take(self, slot: Slot) -> None:
        self.namespaces[slot.namespace] += 1
        self.providers.update(slot.providers)

    def full(self, slot: Slot, limits: Limits) -> bool:
        """Whether ``slot`` cannot start now (``blocked`` without making the message: the
        queue weighs thousands of runs at a time)."""
        per_namespace = limits.per_namespace
        if per_namespace is not None and self.namespaces[slot.namespace] >= per_namespace:
            return True
        for provider in slot.providers:
            limit = limits.per_provider.get(provider)
            if limit is not None and self.providers[provider] >= limit:
                return True
        return False

    def blocked(self, slot: Slot, limits: Limits) -> str | None:
        """Why ``slot`` cannot start now (for its status message), or None."""
        held = self.namespaces[slot.namespace]
        if limits.per_namespace is not None and held >= limits.per_namespace:
            return (
                f"namespace {slot.namespace} has {held} TeamRuns running, its limit is "
                f"{limits.per_namespace}"
            )
        for provider in sorted(slot.providers):
            limit = limits.per_provider.get(provider)
            if limit is not None and self.providers[provider] >= limit:
                return (
                    f"{self.providers[provider]} TeamRuns using {provider} are running, "
                    f"the limit is {limit}"
                )
        return None


def admit(queued: Iterable[Slot], holders: Iterable[Slot], limits: Limits) -> list[Slot]:
    """The queued runs that start now, oldest first, each counted before the next is weighed.

    Only the runs that could start are ordered: with every slot of a namespace taken (the
    usual state of a long queue) its runs are passed over without sorting thousands of them."""
    usage = Usage.of(holders)
    started = []
    candidates = [slot for slot in queued if not usage.full(slot, limits)]
    for slot in sorted(candidates, key=lambda s: s.order):
        if not usage.full(slot, limits):
            usage.take(slot)
            started.append(slot)
    return started


def verdict(
    candidate: Slot, queued: Iterable[Slot], holders: Iterable[Slot], limits: Limits
) -> str | None:
    """None if ``candidate`` may start now, else why it waits. Runs queued before it are weighed
    first, so a new run does not overtake them for a freed slot. A run the holders alone keep
    out waits whatever is queued (queued runs only add to what is held): it is told so at
    once, without weighing the queue."""
    usage = Usage.of(holders)
    if usage.full(candidate, limits):
        return usage.blocked(candidate, limits)
    earlier = [s for s in queued if s.uid != candidate.uid and s.order < candidate.order]
    for slot in sorted(earlier, key=lambda s: s.order):
        if not usage.full(slot, limits):
            usage.take(slot)
    return usage.blocked(candidate, limits)
