"""Runner pods that vanish or end unrecorded, and pod creations the API server refuses (pure
parts)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from oma_operator.resources.bodies import Condition, ConditionStatus, PodBody, TeamRunStatus
from oma_operator.runs.attempts import POD_CREATED, pod_creation_failed, pod_to_retry, resume_of
from oma_operator.runs.rules.outcomes import outcome_when_gone, untracked_action
from tests.operator.pod_fixtures import runner_pod_in


@pytest.mark.parametrize(
    ("pod", "reason", "still"),
    [
        (runner_pod_in("Running"), "PodLost", "Running"),
        (runner_pod_in("Running", deleting=True), "PodLost", "Terminating"),
        (runner_pod_in("Pending"), "PodLost", "Pending"),
    ],
)
def test_a_pod_gone_before_it_ended_is_a_lost_pod_disruption(
    pod: PodBody, reason: str, still: str
) -> None:
    outcome = outcome_when_gone(pod)
    assert (outcome.kind, outcome.reason, outcome.exit_code) == ("disruption", reason, None)
    assert outcome.terminal
    assert outcome.message.startswith(f"the runner pod was deleted while {still} and before")
    assert "finalizer had been removed" in outcome.message


@pytest.mark.parametrize(
    ("pod", "kind", "reason"),
    [
        (runner_pod_in("Succeeded", exit_code=0), "succeeded", "Completed"),
        (runner_pod_in("Failed", exit_code=11), "disruption", "Drained"),
        (runner_pod_in("Failed", exit_code=2), "permanent", "PermanentFailure"),
        (runner_pod_in("Failed", exit_code=137), "crash", "Error"),
    ],
)
def test_a_pod_gone_after_it_ended_counts_as_it_ended(pod: PodBody, kind: str, reason: str) -> None:
    outcome = outcome_when_gone(pod)
    assert (outcome.kind, outcome.reason) == (kind, reason)
    assert outcome.message == "msg"


def _condition(status: ConditionStatus) -> Condition:
    return {"type": POD_CREATED, "status": status, "reason": "CreateFailed", "message": "x"}


def _status(**fields: Any) -> TeamRunStatus:
    base: TeamRunStatus = {
        "phase": "Running",
        "attempt": 2,
        "attempts": [{"attempt": 1, "outcome": "disruption", "endedAt": "2026-01-01T00:00:05Z"}],
        "conditions": [
            {"type": "Progressing", "status": "True", "reason": "AttemptStarted"},
            _condition("False"),
        ],
    }
    # ``fields`` may set what the wire may hold but the view does not type (attempt=None)
    return cast(TeamRunStatus, base | fields)


def test_a_refused_creation_is_retried_for_the_current_attempt() -> None:
    assert pod_creation_failed(_status()) and pod_to_retry(_status()) == 2


@pytest.mark.parametrize(
    "status",
    [
        _status(conditions=[]),  # never refused
        _status(conditions=[_condition("True")]),  # refused once, created since
        _status(phase="Succeeded"),
        _status(phase="AwaitingApproval"),
        _status(attempts=[{"attempt": 1}, {"attempt": 2}]),  # the attempt already ended
        _status(attempt=None),
    ],
)
def test_nothing_to_retry(status: TeamRunStatus) -> None:
    assert pod_to_retry(status) is None


def test_a_retried_pod_resumes_after_how_the_previous_attempt_ended() -> None:
    resume = resume_of(_status(), 2)
    assert resume is not None
    assert (resume.after, resume.ended_at) == (
        "disruption",
        datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC),
    )
    assert resume_of(_status(), 1) is None  # the first attempt resumes nothing
    assert resume_of(_status(attempts=[{"attempt": 1, "outcome": "crash"}]), 2) is None


RUNNING_2: TeamRunStatus = {"phase": "Running", "attempt": 2, "attempts": [{"attempt": 1}]}


@pytest.mark.parametrize(
    ("pod", "attempt", "status", "action"),
    [
        # Recorded by an earlier operator process: nothing to do (the usual case).
        (runner_pod_in("Succeeded", exit_code=0), 2, {**RUNNING_2, "phase": "Succeeded"}, "let_go"),
        (runner_pod_in("Failed", exit_code=11), 1, RUNNING_2, "let_go"),  # an older attempt
        (
            runner_pod_in("Failed", exit_code=11),
            2,
            {**RUNNING_2, "attempts": [{"attempt": 1}, {"attempt": 2}]},
            "let_go",
        ),
        (runner_pod_in("Running"), 2, {**RUNNING_2, "phase": "AwaitingApproval"}, "let_go"),
        (runner_pod_in("Running"), 2, {}, "let_go"),  # a status not written yet
        # The finalizer was removed by hand: an ended pod is recorded now ...
        (runner_pod_in("Succeeded", exit_code=0), 2, RUNNING_2, "record"),
        (runner_pod_in("Failed", exit_code=137), 2, RUNNING_2, "record"),
        (runner_pod_in("Failed", disruption="TerminationByKubelet"), 2, RUNNING_2, "record"),
        # ... a live one is tracked again, and a deleting one is recorded when it is gone.
        (runner_pod_in("Running"), 2, RUNNING_2, "track"),
        (runner_pod_in("Pending"), 2, RUNNING_2, "track"),
        (runner_pod_in("Running", deleting=True), 2, RUNNING_2, "await_deletion"),
    ],
)
def test_what_is_done_about_a_pod_without_its_tracking_finalizer(
    pod: PodBody, attempt: int, status: TeamRunStatus, action: str
) -> None:
    assert untracked_action(pod, attempt, status) == action
