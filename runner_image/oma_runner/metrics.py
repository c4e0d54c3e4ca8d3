"""The runner's Prometheus series (listed in docs/metrics.md), fed by the engine's progress events.

A runner lives as long as one attempt, often shorter than a scrape interval, so the same totals
also go into its termination message (``report``), which the operator adds to its own series.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from oma.budget.state import BudgetReport
from oma.orchestrator.events import OrchestratorEvent
from oma.timeutil import format_iso

log = logging.getLogger(__name__)
# Saves are milliseconds on Redis/PostgreSQL (docs/performance.md); slow ones are what matters.
SAVE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A model call takes from a fraction of a second to minutes (long generations, retries).
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)


class RunnerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.save_seconds = Histogram(
            "oma_runner_checkpoint_save_seconds",
            "Checkpoint saves of this attempt that completed: building the snapshot and "
            "writing it to the store.",
            buckets=SAVE_BUCKETS,
            registry=registry,
        )
        self.save_failures = Counter(
            "oma_runner_checkpoint_save_failures",
            "Best-effort checkpoint saves of this attempt that failed (the run went on).",
            registry=registry,
        )
        self.tool_calls = Counter(
            "oma_runner_tool_calls",
            "Tool calls of this attempt: executed, or replayed from a commit in the checkpoint.",
            ["source"],
            registry=registry,
        )
        for source in ("executed", "replayed"):
            self.tool_calls.labels(source)
        # Labelled by provider and model: one run names a handful of models (its agents'), so
        # the label sets stay small; the operator sums reports without the model.
        self.model_calls = Counter(
            "oma_runner_model_calls",
            "Calls of an agent's model in this attempt, by outcome (error: the call raised).",
            ["provider", "model", "outcome"],
            registry=registry,
        )
        self.model_seconds = Histogram(
            "oma_runner_model_call_seconds",
            "How long the model calls of this attempt took (failed ones too).",
            ["provider", "model"],
            buckets=MODEL_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "oma_runner_tokens",
            "Tokens of this attempt's model calls, as the provider reported them.",
            ["provider", "model", "direction"],
            registry=registry,
        )
        # The run's budget, all attempts together (the checkpoint's count): a gauge per kind.
        self.budget_limit = Gauge(
            "oma_runner_budget_limit",
            "The run's budget limits (its spec's plus approved raises), by kind.",
            ["kind"],
            registry=registry,
        )
        self.budget_used = Gauge(
            "oma_runner_budget_used",
            "What the run has used of each limited kind across its attempts (tokens: spent, "
            "lost and reserved).",
            ["kind"],
            registry=registry,
        )
        # When this attempt's model calls began failing (after its last call that worked), and
        # how many worked: the operator measures a provider outage from there (a run that
        # recovered in between starts a new outage, not the old one's clock).
        self._failing_since: datetime | None = None
        self._model_ok = 0
        self._totals: dict[str, float] = {
            "saves": 0,
            "saveSeconds": 0.0,
            "saveFailures": 0,
            "executed": 0,
            "replayed": 0,
            "modelCalls": 0,
            "modelSeconds": 0.0,
            "inputTokens": 0,
            "outputTokens": 0,
        }

    def on_progress(self, event: OrchestratorEvent) -> None:
        if event.type == "checkpoint_saved":
            seconds = float(event.data.get("seconds", 0.0))
            self.save_seconds.observe(seconds)
            self._totals["saves"] += 1
            self._totals["saveSeconds"] += seconds
        elif event.type == "error" and event.data.get("kind") == "checkpoint_save_failed":
            self.save_failures.inc()
            self._totals["saveFailures"] += 1
        elif event.type == "tool_call":
            source = "executed" if event.data.get("executed") else "replayed"
            self.tool_calls.labels(source).inc()
            self._totals[source] += 1
        elif event.type == "model_call":
            self._model_call(event.data)
        elif event.type == "budget":
            self._budget(event.data.get("report"))

    def _budget(self, report: object) -> None:
        if not isinstance(report, BudgetReport):
            return
        for kind, used, limit in report.usage():
            self.budget_limit.labels(kind).set(limit)
            self.budget_used.labels(kind).set(used)

    def _model_call(self, data: dict[str, Any]) -> None:
        provider, model = str(data.get("provider") or ""), str(data.get("model") or "")
        seconds = float(data.get("seconds") or 0.0)
        tokens_in, tokens_out = (
            int(data.get("inputTokens") or 0),
            int(data.get("outputTokens") or 0),
        )
        outcome = "error" if data.get("error") else "ok"
        if outcome == "ok":
            self._model_ok += 1
            self._failing_since = None
        elif self._failing_since is None:
            self._failing_since = datetime.now(UTC) - timedelta(seconds=seconds)
        self.model_calls.labels(provider, model, outcome).inc()
        self.model_seconds.labels(provider, model).observe(seconds)
        self.tokens.labels(provider, model, "input").inc(tokens_in)
        self.tokens.labels(provider, model, "output").inc(tokens_out)
        totals = self._totals
        totals["modelCalls"] += 1
        totals["modelSeconds"] += seconds
        totals["inputTokens"] += tokens_in
        totals["outputTokens"] += tokens_out

    def report(self) -> dict[str, Any]:
        """This attempt's totals, compact: they share the 4 KiB termination message."""
        totals = self._totals
        return {
            "saves": int(totals["saves"]),
            "saveSeconds": round(totals["saveSeconds"], 6),
            "saveFailures": int(totals["saveFailures"]),
            "toolCalls": {"executed": int(totals["executed"]), "replayed": int(totals["replayed"])},
            "modelCalls": int(totals["modelCalls"]),
            "modelSeconds": round(totals["modelSeconds"], 3),
            "tokens": {"input": int(totals["inputTokens"]), "output": int(totals["outputTokens"])},
            "modelOk": self._model_ok,
            "modelFailingSince": format_iso(self._failing_since) if self._failing_since else None,
        }


def serve(port: int | None, registry: CollectorRegistry = REGISTRY) -> Callable[[], None]:
    """Serve ``/metrics`` on ``port`` from a background thread; returns how to stop it.

    A taken port is logged and skipped: metrics must never cost a run its attempt.
    """
    if not port:
        return lambda: None
    try:
        server, thread = start_http_server(port, registry=registry)
    except OSError as exc:
        log.warning("oma-runner: metrics are off: cannot listen on port %d: %s", port, exc.strerror)
        return lambda: None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)

    return stop
