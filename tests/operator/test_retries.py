"""Which retry requests the operator acts on, and the status a retry writes
(``oma_operator.retries``, ``status.retried``; end to end in tests/cluster/test_operator_e2e.py)."""

from __future__ import annotations

from typing import Any

from oma_operator.models import RETRY_ANNOTATION
from oma_operator.retries import retry_requested
from oma_operator.status import MAX_RETRIES_KEPT, retried


def _run(phase: str, requested: str | None, handled: tuple[str, ...] = ()) -> dict[str, Any]:
    annotations = {RETRY_ANNOTATION: requested} if requested is not None else {}
    return {
        "metadata": {"name": "r", "namespace": "ns", "annotations": annotations},
        "status": {"phase": phase, "retries": [{"requested": h} for h in handled]},
    }


def test_only_an_unhandled_request_on_a_failed_run_is_acted_on() -> None:
    assert retry_requested(_run("Failed", "t2")) == "t2"
    assert retry_requested(_run("Failed", "t2", ("t1",))) == "t2"
    assert retry_requested(_run("Failed", "t1", ("t1",))) is None  # handled once
    assert retry_requested(_run("Failed", None)) is None
    assert retry_requested(_run("Failed", "")) is None
    for phase in ("Succeeded", "Rejected", "Running", "Queued", "AwaitingApproval"):
        assert retry_requested(_run(phase, "t2")) is None, phase
    going = _run("Failed", "t2")
    going["metadata"]["deletionTimestamp"] = "2026-12-04T09:00:00Z"
    assert retry_requested(going) is None


def test_a_retry_queues_the_run_resets_its_failures_and_is_recorded() -> None:
    status: dict[str, Any] = {
        "phase": "Failed",
        "attempt": 3,
        "failures": 4,
        "disruptions": 21,
        "oomKills": 3,
        "nextAttemptAfter": "2026-12-04T09:00:00Z",
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "FailuresExhausted", "message": "m"},
        ],
        "retries": [{"requested": f"t{n}"} for n in range(MAX_RETRIES_KEPT)],
    }
    update = retried(status, "t-new", 7)
    assert (update["phase"], update["nextAttemptAfter"]) == ("Queued", None)
    # Every budget starts again: a run that exhausted its disruptions or OOM kills would
    # otherwise fail at its first one after the retry.
    assert (update["failures"], update["disruptions"], update["oomKills"]) == (0, 0, 0)
    assert update["queuedAt"] and update["observedGeneration"] == 7
    assert len(update["retries"]) == MAX_RETRIES_KEPT  # the oldest dropped
    last = update["retries"][-1]
    assert (last["requested"], last["attempt"], last["failures"]) == ("t-new", 3, 4)
    assert (last["disruptions"], last["oomKills"]) == (21, 3)
    assert last["reason"] == "FailuresExhausted" and last["retriedAt"]
    conditions = {c["type"]: c for c in update["conditions"]}
    assert (conditions["Failed"]["status"], conditions["Failed"]["reason"]) == ("False", "Retried")
    assert conditions["Progressing"]["status"] == "True"
    assert "after attempt 3 failed (FailuresExhausted)" in update["message"]
