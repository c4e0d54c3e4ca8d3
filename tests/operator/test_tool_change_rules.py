"""A resumed attempt that found a tool it recorded changed or gone on its MCP server (runner
exit 15; nothing was called) holds the run: the next attempt looks again after a backoff that
doubles up to 5 minutes, no failure budget used, until ``toolChangeSeconds`` have passed since
the hold began; then the run fails ``ToolChangeExhausted`` (``oma retry`` takes it up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from oma.pod_contract import Exit, TerminationReport, exit_for_error
from oma.timeutil import format_iso
from oma.tools.mcp import McpToolChangedError
from oma_operator.resources.bodies import TeamRunStatus
from oma_operator.resources.models import RetryPolicy
from oma_operator.runs.rules.decisions import Decision, attempt_record, decide
from oma_operator.runs.rules.holds import held
from oma_operator.runs.rules.outcomes import Outcome, classify
from oma_operator.runs.rules.status import after_attempt
from tests.operator.pod_fixtures import runner_pod_in

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(backoff_seconds=10, max_failures=0, tool_change_seconds=600)
CHANGED = McpToolChangedError("clerk", "crm__find", "is gone from its server")


def _changed(exit_code: int = Exit.TOOL_CHANGED) -> Outcome:
    report = TerminationReport(status="tool_changed", message=f"{CHANGED.code}: {CHANGED}")
    said = report.model_dump_json(by_alias=True)
    if exit_code == Exit.TOOL_CHANGED:
        return Outcome("tool_changed", "ToolChanged", said, exit_code)
    return Outcome("permanent", "PermanentFailure", said, exit_code)


def _decide(status: dict[str, Any], minutes: float, outcome: Outcome | None = None) -> Decision:
    at = NOW + timedelta(minutes=minutes)
    return decide(outcome or _changed(), status, POLICY, 3, now=at)  # type: ignore[arg-type]


def test_a_changed_tool_ends_the_runner_with_exit_15_the_operator_reads_as_a_hold() -> None:
    assert exit_for_error(CHANGED) is Exit.TOOL_CHANGED
    assert int(Exit.TOOL_CHANGED) == 15
    outcome = classify(runner_pod_in("Failed", exit_code=Exit.TOOL_CHANGED))
    assert (outcome.kind, outcome.reason, outcome.terminal) == ("tool_changed", "ToolChanged", True)


def test_the_first_hold_starts_the_clock_uses_no_budget_and_names_the_tool() -> None:
    decision = _decide({"failures": 0}, 0)
    assert decision.action == "next_attempt"
    assert decision.reason == "ToolChanged"
    assert decision.counters == {"disruptions": 0, "failures": 0, "oomKills": 0}
    assert decision.delay_seconds == 10
    assert decision.tool_changed_since == format_iso(NOW)
    assert decision.outage_since is None
    assert "agent 'clerk'" in decision.message and "'crm__find' is gone" in decision.message
    assert "nothing was called" in decision.message and "attempt 4 in 10s" in decision.message


def test_attempts_back_off_doubling_up_to_five_minutes_from_the_holds_start() -> None:
    since = format_iso(NOW)
    delays = []
    for before in range(7):
        records = [{"outcome": "tool_changed"}] * before
        status = {"toolChangedSince": since, "attempts": [{"outcome": "crash"}, *records]}
        decision = _decide(status, 0.5)
        delays.append(decision.delay_seconds)
        assert decision.tool_changed_since == since  # the clock runs from the first
    assert delays == [10, 20, 40, 80, 160, 300, 300]


def test_a_hold_longer_than_the_policy_fails_the_run_naming_the_tool() -> None:
    decision = _decide({"toolChangedSince": format_iso(NOW)}, 10)
    assert (decision.action, decision.reason) == ("failed", "ToolChangeExhausted")
    assert "toolChangeSeconds is 600" in decision.message
    assert "'crm__find' is gone" in decision.message and "oma retry" in decision.message


def test_an_attempt_that_ends_otherwise_ends_the_hold() -> None:
    status: TeamRunStatus = {"toolChangedSince": format_iso(NOW), "attempt": 4}
    drained = Outcome("disruption", "Drained", "", 11)
    decision = _decide(dict(status), 1, drained)
    assert decision.tool_changed_since is None
    after = after_attempt(status, decision, attempt_record(4, drained, "pod-4", "t"), 1, 5)
    assert after["toolChangedSince"] is None  # a merge patch removes it


def test_the_status_shows_the_hold_as_progressings_reason_with_the_tool() -> None:
    decision = _decide({}, 0)
    after = after_attempt({}, decision, attempt_record(1, _changed(), "pod-1", "t"), 1, 2)
    assert after["toolChangedSince"] == format_iso(NOW)
    progressing = after["conditions"][0]
    assert (progressing["type"], progressing["reason"]) == ("Progressing", "ToolChanged")
    assert "'crm__find' is gone" in progressing["message"]
    assert after["attempts"][-1]["outcome"] == "tool_changed"


def test_a_runner_from_before_exit_15_that_said_it_in_its_report_holds_too() -> None:
    """Classified as the hold it is (so recorded, backed off and counted as one)."""
    said = _changed(Exit.PERMANENT).message
    pod = runner_pod_in("Failed", exit_code=Exit.PERMANENT, message=said)
    outcome = classify(pod)
    assert (outcome.kind, outcome.reason) == ("tool_changed", "ToolChanged")
    records = [attempt_record(n, outcome, f"pod-{n}", "t") for n in (1, 2)]
    decision = _decide({"toolChangedSince": format_iso(NOW), "attempts": records}, 0.5, outcome)
    assert (decision.action, decision.reason, decision.delay_seconds) == (
        "next_attempt",
        "ToolChanged",
        40,
    )
    other = runner_pod_in("Failed", exit_code=Exit.PERMANENT, message=f"LLM_ERROR: {CHANGED}")
    assert classify(other).kind == "permanent"


def test_a_run_held_between_attempts_starts_its_clocks_again_when_let_go() -> None:
    """Suspended (or cancelled) while waiting for its next attempt, with no pod to stop: the
    hold ends the wait, so a resume hours later does not find the tool's time used up."""
    status: TeamRunStatus = {
        "phase": "Running",
        "toolChangedSince": format_iso(NOW),
        "modelOutageSince": format_iso(NOW),
    }
    for hold in ("suspend", "cancel"):
        update = held(status, hold, 3)
        assert update["toolChangedSince"] is None and update["modelOutageSince"] is None
    resumed_later = _decide({}, 120)
    assert (resumed_later.action, resumed_later.reason) == ("next_attempt", "ToolChanged")


def test_a_retry_starts_the_backoff_again() -> None:
    """After ``oma retry`` (recorded at attempt 7) the first wait is backoffSeconds again,
    not the 5 minutes the attempts before the retry had reached."""
    before = [{"attempt": n, "outcome": "tool_changed"} for n in range(1, 8)]
    status = {"attempts": before, "retries": [{"attempt": 7}]}
    assert _decide(status, 0).delay_seconds == 10
    after = [*before, {"attempt": 8, "outcome": "tool_changed"}]
    assert _decide({"attempts": after, "retries": [{"attempt": 7}]}, 0).delay_seconds == 20


def test_a_permanent_failure_that_does_not_start_with_the_code_is_not_a_hold() -> None:
    report = TerminationReport(status="failed", message=f"LLM_ERROR: {CHANGED}")
    outcome = Outcome("permanent", "PermanentFailure", report.model_dump_json(by_alias=True), 2)
    decision = _decide({}, 0, outcome)
    assert (decision.action, decision.reason) == ("failed", "PermanentFailure")


def test_a_suspend_during_a_hold_suspends_the_run() -> None:
    decision = decide(_changed(), {}, POLICY, 3, hold="suspend", now=NOW)
    assert (decision.action, decision.reason) == ("suspended", "Suspended")
