"""``spec.suspend`` and ``spec.cancel`` (pure): what each asks for in each phase, how an
attempt's end is decided under a hold, and the statuses written."""

from __future__ import annotations

from typing import Any

import pytest

from oma.pod_contract import Exit
from oma_operator.resources.bodies import ObjectMeta, TeamRunBody, TeamRunStatus
from oma_operator.resources.models import RetryPolicy, TeamRunSpec
from oma_operator.resources.phases import FINAL_PHASES
from oma_operator.runs.rules.decisions import attempt_record, decide
from oma_operator.runs.rules.holds import action_for, held, hold_of, resumed
from oma_operator.runs.rules.outcomes import Outcome
from oma_operator.runs.rules.status import after_attempt

POLICY = RetryPolicy(max_disruptions=3, max_failures=2, backoff_seconds=5)
DRAINED = Outcome("disruption", "Drained", "", Exit.DRAINED)
CRASHED = Outcome("crash", "Error", "boom", 1)
SUCCEEDED = Outcome("succeeded", "Completed", "", 0)
PERMANENT = Outcome("permanent", "PermanentFailure", "bad spec", Exit.PERMANENT)
WAITING = Outcome("suspended", "AwaitingApproval", "gate", Exit.SUSPENDED)


@pytest.mark.parametrize(
    ("phase", "hold", "action"),
    [
        ("Running", "suspend", "suspend"),
        ("Queued", "suspend", "suspend"),
        (None, "suspend", "suspend"),  # created suspended: held before any pod
        ("Suspended", "suspend", None),
        ("AwaitingApproval", "suspend", None),  # no pod to stop; held when it would start
        ("Running", "cancel", "cancel"),
        ("Suspended", "cancel", "cancel"),
        ("AwaitingApproval", "cancel", "cancel"),
        ("Suspended", None, "resume"),
        ("Running", None, None),
        *[(phase, hold, None) for phase in sorted(FINAL_PHASES) for hold in ("cancel", None)],
    ],
)
def test_what_a_hold_asks_for_in_each_phase(phase: str | None, hold: Any, action: Any) -> None:
    assert action_for(phase, hold) == action


def test_cancel_wins_over_suspend() -> None:
    base: dict[str, Any] = {
        "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
        "tasks": [{"title": "t", "description": "d"}],
        "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
    }
    assert hold_of(TeamRunSpec.model_validate(base)) is None
    assert hold_of(TeamRunSpec.model_validate({**base, "suspend": True})) == "suspend"
    assert (
        hold_of(TeamRunSpec.model_validate({**base, "suspend": True, "cancel": True})) == "cancel"
    )


@pytest.mark.parametrize("outcome", [DRAINED, CRASHED])
def test_a_drained_or_crashed_attempt_under_suspend_is_suspended_and_counts_nothing(
    outcome: Outcome,
) -> None:
    counters: TeamRunStatus = {"attempt": 2, "disruptions": 1, "failures": 1}
    decision = decide(outcome, counters, POLICY, 2, "suspend")
    assert decision.action == "suspended" and decision.reason == "Suspended"
    assert decision.counters == {"disruptions": 1, "failures": 1, "oomKills": 0}
    assert decision.delay_seconds == 0
    assert decide(outcome, counters, POLICY, 2).action == "next_attempt"  # without the hold


def test_a_pod_stopped_for_a_hold_cleared_before_its_end_counts_nothing() -> None:
    """Suspend, then resume before the drained pod's end is in: the next attempt starts at
    once, and the drain is no disruption (a few suspend/resume rounds cannot fail the run)."""
    counters: TeamRunStatus = {"attempt": 2, "disruptions": 3}  # the budget (3) is used up
    decision = decide(DRAINED, counters, POLICY, 2, None, stopped_for_hold=True)
    assert (decision.action, decision.reason) == ("next_attempt", "StoppedForHold")
    assert decision.counters == {"disruptions": 3, "failures": 0, "oomKills": 0}
    assert decision.delay_seconds == 0
    # The same end of a pod nobody stopped for a hold: a disruption, past the budget.
    assert decide(DRAINED, counters, POLICY, 2).action == "failed"
    # A pod stopped for a hold that ended otherwise (it crashed first) is judged as it ended.
    assert decide(CRASHED, {"failures": 2}, POLICY, 2, None, stopped_for_hold=True).action == (
        "failed"
    )


@pytest.mark.parametrize("outcome", [DRAINED, CRASHED, WAITING])
def test_an_attempt_ending_under_cancel_ends_the_run_cancelled(outcome: Outcome) -> None:
    decision = decide(outcome, {"attempt": 1}, POLICY, 1, "cancel")
    assert (decision.action, decision.reason) == ("cancelled", "Cancelled")
    assert "checkpoint is kept" in decision.message


@pytest.mark.parametrize("hold", ["cancel", "suspend"])
def test_an_end_that_came_first_stands(hold: Any) -> None:
    assert decide(SUCCEEDED, {"attempt": 1}, POLICY, 1, hold).action == "succeeded"
    assert decide(PERMANENT, {"attempt": 1}, POLICY, 1, hold).action == "failed"
    spent: TeamRunStatus = {"attempt": 3, "failures": 2}
    exhausted = decide(CRASHED, spent, POLICY, 3, hold)
    assert (exhausted.action, exhausted.reason) == ("failed", "FailuresExhausted")


def test_an_approval_gate_reached_under_suspend_still_waits_for_its_reviewers() -> None:
    assert decide(WAITING, {"attempt": 1}, POLICY, 1, "suspend").action == "awaiting_approval"


@pytest.mark.parametrize(("hold", "phase"), [("suspend", "Suspended"), ("cancel", "Cancelled")])
def test_the_status_after_a_held_attempt(hold: Any, phase: str) -> None:
    status: TeamRunStatus = {"phase": "Running", "attempt": 1, "conditions": []}
    decision = decide(DRAINED, status, POLICY, 1, hold)
    record = attempt_record(1, DRAINED, "r-a1", "2026-12-04T00:00:00.000Z")
    update = after_attempt(status, decision, record, 3, None)
    assert update["phase"] == phase
    assert update["nextAttemptAfter"] is None and "attempt" not in update  # no next attempt
    conditions = {c["type"]: c for c in update["conditions"]}
    assert conditions[phase]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"
    final = hold == "cancel"
    assert ("Failed" in conditions) is final and ("Succeeded" in conditions) is final
    if final:
        assert conditions["Failed"]["status"] == conditions["Succeeded"]["status"] == "False"


def test_a_run_held_without_a_pod_leaves_the_queue() -> None:
    status: TeamRunStatus = {"phase": "Queued", "queuedAt": "t", "conditions": []}
    update = held(status, "suspend", 2)
    assert update["phase"] == "Suspended" and update["queuedAt"] is None
    conditions = {c["type"]: c["status"] for c in update["conditions"]}
    assert conditions == {"Progressing": "False", "Suspended": "True", "Queued": "False"}
    cancelled = held({"phase": "AwaitingApproval"}, "cancel", 2)
    assert cancelled["phase"] == "Cancelled" and "Queued" not in {
        c["type"] for c in cancelled["conditions"]
    }


def test_a_resumed_run_waits_for_a_slot_as_queued() -> None:
    update = resumed({"phase": "Suspended", "conditions": []}, 4)
    assert update["phase"] == "Queued" and update["queuedAt"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in update["conditions"]}
    assert conditions["Suspended"] == ("False", "Resumed")
    assert conditions["Progressing"] == ("True", "Resumed")


def test_a_pod_about_to_start_follows_the_newest_spec_of_the_two_copies() -> None:
    """``hold_now``: the copy with the higher generation (spec changes) decides, so a hold set
    during a backoff stops the start, and a lagging watch still showing a cleared suspend
    does not block the resumed attempt."""
    from oma_operator.k8s.watched import WATCHED
    from oma_operator.runs.held_runs import hold_now

    def body(generation: int, **spec: Any) -> TeamRunBody:
        base: dict[str, Any] = {
            "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
            "tasks": [{"title": "t", "description": "d"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
        }
        meta: ObjectMeta = {"namespace": "ns", "name": "r", "uid": "u", "generation": generation}
        return {"metadata": meta, "spec": {**base, **spec}}

    index: dict[tuple[str, str], list[TeamRunBody]] = {}
    WATCHED.attach(index)
    try:
        index[("ns", "r")] = [body(3, suspend=True)]  # set after the start was decided
        assert hold_now(body(2)) == "suspend"
        index[("ns", "r")] = [body(3, suspend=True)]  # the watch lags: cleared since, gen 4
        assert hold_now(body(4, suspend=False)) is None
        assert hold_now(body(5, cancel=True)) == "cancel"  # (specs are parsed once a generation)
    finally:
        WATCHED.attach(None)
