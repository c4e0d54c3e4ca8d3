"""A model provider's outage (runner exit 14) is waited out: the next attempt after a backoff
that doubles up to 5 minutes, no failure budget used, until ``modelOutageSeconds`` have passed
since the outage began; then the run fails ``ModelOutageExhausted``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from oma.orchestrator.events import OrchestratorEvent
from oma.pod_contract import Exit, TerminationReport
from oma.timeutil import format_iso, parse_iso
from oma_operator.resources.bodies import TeamRunStatus
from oma_operator.resources.models import RetryPolicy
from oma_operator.runs.rules.decisions import Decision, attempt_record, decide
from oma_operator.runs.rules.outcomes import Outcome, classify
from oma_operator.runs.rules.status import after_attempt
from oma_runner.metrics import RunnerMetrics
from tests.operator.pod_fixtures import runner_pod_in

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(backoff_seconds=10, max_failures=1, model_outage_seconds=600)
SAID = "anthropic model 'claude' answered HTTP 529 after 2 retries: Overloaded"


def _outage() -> Outcome:
    report = TerminationReport(status="model_unavailable", message=f"MODEL_UNAVAILABLE: {SAID}")
    return Outcome("outage", "ModelUnavailable", report.model_dump_json(by_alias=True), 14)


def _after(status: dict[str, Any], minutes: float) -> Decision:
    return decide(_outage(), status, POLICY, 1, now=NOW + timedelta(minutes=minutes))  # type: ignore[arg-type]


def test_the_runner_exit_14_is_a_model_outage() -> None:
    outcome = classify(runner_pod_in("Failed", exit_code=Exit.MODEL_UNAVAILABLE))
    assert (outcome.kind, outcome.reason, outcome.terminal) == ("outage", "ModelUnavailable", True)


def test_the_first_outage_starts_the_clock_and_uses_no_budget() -> None:
    decision = decide(_outage(), {"failures": 1}, POLICY, 3, now=NOW)
    assert decision.action == "next_attempt" and decision.reason == "ModelUnavailable"
    assert decision.counters == {"disruptions": 0, "failures": 1, "oomKills": 0}
    assert decision.delay_seconds == 10 and decision.outage_since == format_iso(NOW)
    assert SAID in decision.message and "attempt 4 in 10s" in decision.message


def test_attempts_back_off_doubling_up_to_five_minutes_from_the_outages_start() -> None:
    records = [{"outcome": "outage"}] * 2
    status: dict[str, Any] = {"modelOutageSince": format_iso(NOW), "attempts": records}
    decision = _after(status, 3)
    assert decision.action == "next_attempt" and decision.delay_seconds == 40
    assert decision.outage_since == format_iso(NOW)  # the outage's start, not this attempt's
    many: dict[str, Any] = {**status, "attempts": [{"outcome": "outage"}] * 12}
    assert _after(many, 4).delay_seconds == 300
    # An attempt that ended otherwise in between: the streak (and the backoff) starts again.
    broken: dict[str, Any] = {**status, "attempts": [*records, {"outcome": "crash"}]}
    assert _after(broken, 3).delay_seconds == 10


def test_an_outage_longer_than_the_policy_fails_the_run() -> None:
    status: dict[str, Any] = {"modelOutageSince": format_iso(NOW), "failures": 0}
    decision = _after(status, 10)
    assert decision.action == "failed" and decision.reason == "ModelOutageExhausted"
    assert "600s" in decision.message and SAID in decision.message
    at_once = decide(_outage(), {}, RetryPolicy(model_outage_seconds=0), 1, now=NOW)
    assert at_once.action == "failed"


def test_an_attempt_that_ends_otherwise_ends_the_outage() -> None:
    status: TeamRunStatus = {"modelOutageSince": format_iso(NOW), "attempt": 2, "phase": "Running"}
    crash = decide(Outcome("crash", "Error"), status, POLICY, 2, now=NOW)
    assert crash.outage_since is None
    record = attempt_record(2, Outcome("crash", "Error"), "pod-2", format_iso(NOW))
    update = after_attempt(status, crash, record, 1, 3)
    assert "modelOutageSince" in update and update["modelOutageSince"] is None
    outage = _after({}, 0)
    kept = after_attempt({}, outage, attempt_record(1, _outage(), "pod-1", "t"), 1, 2)
    assert kept["modelOutageSince"] == format_iso(NOW)
    assert kept["conditions"][0]["reason"] == "ModelUnavailable"


def _reported(metrics: dict[str, Any]) -> Outcome:
    report = TerminationReport(
        status="model_unavailable", message=f"MODEL_UNAVAILABLE: {SAID}", metrics=metrics
    )
    return Outcome("outage", "ModelUnavailable", report.model_dump_json(by_alias=True), 14)


def test_an_attempt_that_worked_before_failing_again_starts_a_new_outage() -> None:
    """The clock of an outage the run recovered from is not carried into the next one: the
    runner says since when its calls fail and that some worked before."""
    status: dict[str, Any] = {"modelOutageSince": format_iso(NOW), "attempts": [{}]}
    later = NOW + timedelta(minutes=30)  # far past the policy's 600 s since the first outage
    failing = format_iso(later - timedelta(seconds=20))
    recovered = _reported({"modelOk": 40, "modelFailingSince": failing})
    decision = decide(recovered, status, POLICY, 5, now=later)  # type: ignore[arg-type]
    assert decision.action == "next_attempt" and decision.outage_since == failing
    assert "for up to 580s more" in decision.message
    # No call worked in this attempt: the same outage goes on, and has lasted too long.
    still = _reported({"modelOk": 0, "modelFailingSince": failing})
    assert decide(still, status, POLICY, 5, now=later).action == "failed"  # type: ignore[arg-type]
    # A report that says nothing of it (an older runner): as before.
    assert decide(_outage(), status, POLICY, 5, now=later).action == "failed"  # type: ignore[arg-type]
    # The first outage of a run starts where its calls began failing, not at the attempt's end.
    first = decide(still, {}, POLICY, 1, now=later)
    assert first.outage_since == failing


def test_the_runner_reports_since_when_its_model_calls_fail() -> None:
    metrics = RunnerMetrics(CollectorRegistry())
    call = {"provider": "anthropic", "model": "m", "seconds": 2.0}
    metrics.on_progress(OrchestratorEvent("model_call", data={**call, "error": "LLMError"}))
    metrics.on_progress(OrchestratorEvent("model_call", data={**call, "error": None}))
    assert metrics.report()["modelFailingSince"] is None and metrics.report()["modelOk"] == 1
    before = datetime.now(UTC)
    metrics.on_progress(OrchestratorEvent("model_call", data={**call, "error": "LLMError"}))
    first = parse_iso(metrics.report()["modelFailingSince"])
    metrics.on_progress(OrchestratorEvent("model_call", data={**call, "error": "LLMError"}))
    assert parse_iso(metrics.report()["modelFailingSince"]) == first  # the streak's first
    assert first is not None and before - timedelta(seconds=3) <= first <= datetime.now(UTC)
