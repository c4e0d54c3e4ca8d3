"""The operator's Prometheus series (listed in docs/metrics.md) and the endpoint serving them.

Handlers only report what they saw (an event, an ended attempt, a created pod); turning that into
series lives here. Labels stay low-cardinality on purpose: a phase, an outcome kind, a decision,
never a run or pod name (those belong in the TeamRun's status and Events).
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server
from pydantic import ValidationError

from oma.budget.state import BudgetReport
from oma.pod_contract import TerminationReport
from oma.timeutil import parse_iso
from oma_operator.resources.bodies import DecisionBody, PodBody, TeamRunBody
from oma_operator.runs.rules.outcomes import TERMINAL

log = logging.getLogger(__name__)
PHASES = (
    "Pending",
    "Queued",
    "Running",
    "AwaitingApproval",
    "Suspended",
    "Succeeded",
    "Failed",
    "Rejected",
    "Cancelled",
)
# What may precede a new attempt: an automatic retry, or a suspension resumed after approvals.
RESUMED_AFTER = ("disruption", "oom", "crash", "outage", "tool_changed", "suspended")
DECISIONS = ("approved", "rejected")
TOOL_CALL_SOURCES = ("executed", "replayed")
# Resumes take seconds (plus the crash backoff, up to an hour); approvals take minutes to days.
RESUME_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
APPROVAL_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400)


@dataclass(frozen=True)
class Resume:
    """Why and since when a run waited for its next attempt's pod."""

    after: str
    ended_at: datetime


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.teamruns = Gauge(
            "oma_teamruns", "TeamRuns the operator watches, by phase.", ["phase"], registry=registry
        )
        self.attempts = Counter(
            "oma_attempts",
            "Runner attempts that ended, by how the operator classified the pod's outcome.",
            ["outcome"],
            registry=registry,
        )
        self.resume_latency = Histogram(
            "oma_resume_latency_seconds",
            "From an attempt's pod ending to the next attempt's pod being created.",
            ["after"],
            buckets=RESUME_BUCKETS,
            registry=registry,
        )
        self.approval_wait = Histogram(
            "oma_approval_wait_seconds",
            "From an ApprovalDecision's creation to its decision being recorded.",
            ["decision"],
            buckets=APPROVAL_BUCKETS,
            registry=registry,
        )
        # Totals from the runners' termination reports: complete even when no scrape ever
        # reached a short-lived runner pod (attempts killed outright send no report).
        self.tool_calls = Counter(
            "oma_reported_tool_calls",
            "Tool calls of ended attempts, as their runners reported them, by source.",
            ["source"],
            registry=registry,
        )
        self.checkpoint_saves = Counter(
            "oma_reported_checkpoint_saves",
            "Checkpoint saves of ended attempts, as their runners reported them.",
            registry=registry,
        )
        self.checkpoint_save_seconds = Counter(
            "oma_reported_checkpoint_save_seconds",
            "Time those checkpoint saves took, in total.",
            registry=registry,
        )
        self.checkpoint_save_failures = Counter(
            "oma_reported_checkpoint_save_failures",
            "Best-effort checkpoint saves of ended attempts that failed (the run went on).",
            registry=registry,
        )
        # Summed without provider or model labels: model names come from every tenant's specs,
        # an unbounded set; each runner's own endpoint has them.
        self.model_calls = Counter(
            "oma_reported_model_calls",
            "Model calls of ended attempts, as their runners reported them.",
            registry=registry,
        )
        self.model_seconds = Counter(
            "oma_reported_model_call_seconds",
            "The time those model calls took, in total.",
            registry=registry,
        )
        self.tokens = Counter(
            "oma_reported_tokens",
            "Tokens of ended attempts' model calls, as their runners reported them.",
            ["direction"],
            registry=registry,
        )
        for direction in ("input", "output"):
            self.tokens.labels(direction)
        # Per namespace (the tenant a budget is charged to), summed over its TeamRuns with a
        # budget as their statuses show it: a bounded label, unlike run names.
        self.budget_used = Gauge(
            "oma_budget_used",
            "What the TeamRuns of a namespace have used of their budgets (status.budget), by "
            "kind; tokens include lost and reserved ones.",
            ["namespace", "kind"],
            registry=registry,
        )
        self.budget_limit = Gauge(
            "oma_budget_limit",
            "The budgets of a namespace's TeamRuns, summed, by kind.",
            ["namespace", "kind"],
            registry=registry,
        )
        for phase in PHASES:
            self.teamruns.labels(phase)
        for kind in sorted(TERMINAL):
            self.attempts.labels(kind)
        for after in RESUMED_AFTER:
            self.resume_latency.labels(after)
        for decision in DECISIONS:
            self.approval_wait.labels(decision)
        for source in TOOL_CALL_SOURCES:
            self.tool_calls.labels(source)
        self._phases: dict[str, str] = {}  # TeamRun uid -> phase
        self._counts: Tally[str] = Tally()  # TeamRuns by phase
        self._decided: set[str] = set()  # uids of ApprovalDecisions known to be decided
        # TeamRun uid -> (namespace, {kind: (used, limit)}); the series set so far
        self._budgets: dict[str, tuple[str, dict[str, tuple[float, float]]]] = {}
        self._budget_series: set[tuple[str, str]] = set()

    def teamrun_seen(self, body: TeamRunBody, event_type: str | None) -> None:
        # Counted as phases change, not recounted per event: thousands of TeamRuns, each event.
        uid = str(body.get("metadata", {}).get("uid", ""))
        self._budget_seen(uid, body, event_type)
        before = self._phases.get(uid)
        if event_type == "DELETED":
            self._phases.pop(uid, None)
            now = None
        else:
            now = str((body.get("status") or {}).get("phase") or "Pending")
            self._phases[uid] = now
        if before == now:
            return
        for phase, change in ((before, -1), (now, 1)):
            if phase is not None:
                self._counts[phase] += change
                self.teamruns.labels(phase).set(self._counts[phase])

    def _budget_seen(self, uid: str, body: TeamRunBody, event_type: str | None) -> None:
        namespace = str(body.get("metadata", {}).get("namespace", ""))
        found = budget_figures((body.get("status") or {}).get("budget"))
        old = self._budgets.get(uid)
        if event_type == "DELETED" or not found:
            self._budgets.pop(uid, None)
        else:
            self._budgets[uid] = (namespace, found)
        if old == self._budgets.get(uid):
            return
        for space in {namespace} | ({old[0]} if old is not None else set()):
            self._budget_totals(space)

    def _budget_totals(self, namespace: str) -> None:
        totals: dict[str, tuple[float, float]] = {}
        for space, figures in self._budgets.values():
            if space != namespace:
                continue
            for kind, (used, limit) in figures.items():
                before = totals.get(kind, (0.0, 0.0))
                totals[kind] = (before[0] + used, before[1] + limit)
        for kind in BUDGET_KINDS:
            # A namespace's series stays once it existed (at 0 when its last run went).
            if kind not in totals and (namespace, kind) not in self._budget_series:
                continue
            self._budget_series.add((namespace, kind))
            used, limit = totals.get(kind, (0.0, 0.0))
            self.budget_used.labels(namespace, kind).set(used)
            self.budget_limit.labels(namespace, kind).set(limit)

    def attempt_ended(self, kind: str) -> None:
        self.attempts.labels(kind).inc()

    def resumed(self, resume: Resume, now: datetime | None = None) -> None:
        waited = ((now or datetime.now(UTC)) - resume.ended_at).total_seconds()
        self.resume_latency.labels(resume.after).observe(max(0.0, waited))

    def decision_seen(
        self, body: DecisionBody, event_type: str | None, now: datetime | None = None
    ) -> None:
        """Observe the wait once, when a decision turns recorded while this operator watches
        (decisions already recorded at startup were observed by the operator that saw them)."""
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        uid = str(meta.get("uid", ""))
        if event_type == "DELETED":
            self._decided.discard(uid)
            return
        if not status.get("recorded") or not status.get("decision") or uid in self._decided:
            return
        self._decided.add(uid)
        created = parse_iso(str(meta.get("creationTimestamp", "")))
        if event_type is None or created is None:
            return
        decided = parse_iso(str(status.get("decidedAt", ""))) or now or datetime.now(UTC)
        decision = str(status["decision"]).lower()
        self.approval_wait.labels(decision).observe(max(0.0, (decided - created).total_seconds()))

    def runner_report(self, report: TerminationReport | None) -> None:
        """Add the ``metrics`` of a runner's termination report, if it has any."""
        found = report.metrics if report is not None else None
        if found is None:
            return
        calls = found.get("toolCalls")
        if not isinstance(calls, dict):
            calls = {}
        for source in TOOL_CALL_SOURCES:
            self.tool_calls.labels(source).inc(_amount(calls.get(source)))
        self.checkpoint_saves.inc(_amount(found.get("saves")))
        self.checkpoint_save_seconds.inc(_amount(found.get("saveSeconds")))
        self.checkpoint_save_failures.inc(_amount(found.get("saveFailures")))
        self.model_calls.inc(_amount(found.get("modelCalls")))
        self.model_seconds.inc(_amount(found.get("modelSeconds")))
        tokens = found.get("tokens")
        if isinstance(tokens, dict):
            for direction in ("input", "output"):
                self.tokens.labels(direction).inc(_amount(tokens.get(direction)))


BUDGET_KINDS = ("tokens", "modelCalls", "toolCalls")


def budget_figures(value: object) -> dict[str, tuple[float, float]]:
    """(used, limit) by kind from a status's ``budget``; what does not parse is left out (a
    status written by someone else never breaks the operator)."""
    try:
        report = BudgetReport.model_validate(value)
    except ValidationError:
        return {}
    return {kind: (float(used), float(limit)) for kind, used, limit in report.usage()}


def _amount(value: Any) -> float:
    """A report's number, or 0 for anything else (a report never breaks the operator)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return 0.0
    return float(value)


def pod_ended_at(pod: PodBody) -> datetime | None:
    """When the runner container finished, as its status says (second precision)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        finished = ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if finished:
            return parse_iso(str(finished))
    return None


def serve(
    port: int, address: str, registry: CollectorRegistry = REGISTRY
) -> Callable[[], None] | None:
    """Serve ``/metrics`` from a background thread; returns how to stop it, or ``None`` when
    off or the port is taken (logged): missing metrics must not stop the operator."""
    if port == 0:
        return None
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        log.error("metrics are off: cannot listen on %s:%d: %s", address, port, exc.strerror)
        return None
    log.info("serving metrics on http://%s:%d/metrics", address, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)

    return stop


METRICS = OperatorMetrics()
