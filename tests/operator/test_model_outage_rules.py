"""A model provider's outage (runner exit 14) is waited out: the next attempt after a backoff
that doubles up to 5 minutes, no failure budget used, until ``modelOutageSeconds`` have passed
since the outage began; then the run fails ``ModelOutageExhausted``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from oma.pod_contract import Exit, TerminationReport
from oma.timeutil import format_iso
from oma.tools.mcp import McpToolChangedError
from oma_operator.resources.bodies import TeamRunStatus
from oma_operator.resources.models import RetryPolicy
from oma_operator.runs.rules.decisions import Decision, attempt_record, decide
from oma_operator.runs.rules.outcomes import Outcome, classify
from oma_operator.runs.rules.status import after_attempt
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


def test_a_changed_mcp_tool_fails_the_run_with_its_own_reason_and_the_tools_name() -> None:
    said = "MCP_TOOL_CHANGED: agent 'clerk': MCP tool 'crm__find' is gone from its server"
    report = TerminationReport(status="failed", message=said)
    outcome = Outcome("permanent", "PermanentFailure", report.model_dump_json(by_alias=True), 2)
    decision = decide(outcome, {}, POLICY, 2, now=NOW)
    assert (decision.action, decision.reason) == ("failed", "McpToolChanged")
    assert "'crm__find' is gone" in decision.message
    assert McpToolChangedError.code == "MCP_TOOL_CHANGED"
