"""Which retry requests the operator acts on, and the status a retry writes
(``oma_operator.runs.retries``, ``status.retried``; end to end in
tests/cluster/test_operator_e2e.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

from oma.approval import DurableApprovalLedger
from oma.approval.ledger import ApprovalRecord
from oma.store import InMemoryStore
from oma_operator.resources.bodies import TeamRunBody, TeamRunStatus, teamrun_view
from oma_operator.resources.models import EDITORS_ANNOTATION, RETRY_ANNOTATION
from oma_operator.resources.phases import Phase
from oma_operator.resources.specs import work_digest
from oma_operator.runs.retries import (
    SPEC_NOT_RECORDED,
    refusal_for,
    retry_refusal,
    retry_requested,
)
from oma_operator.runs.rules.status import MAX_RETRIES_KEPT, RETRY_REFUSED, retried, retry_refused
from tests.cluster.approval_kit import tool_request


def _run(phase: Phase, requested: str | None, handled: tuple[str, ...] = ()) -> TeamRunBody:
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
    others: tuple[Phase, ...] = ("Succeeded", "Rejected", "Running", "Queued", "AwaitingApproval")
    for phase in others:
        assert retry_requested(_run(phase, "t2")) is None, phase
    going = _run("Failed", "t2")
    going["metadata"]["deletionTimestamp"] = "2026-12-04T09:00:00Z"
    assert retry_requested(going) is None


def test_a_retry_queues_the_run_resets_its_failures_and_is_recorded() -> None:
    status: TeamRunStatus = {
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


def _spec() -> TeamRunBody:
    return {
        "spec": {
            "team": {"agents": [{"name": "clerk", "model": {"provider": "scripted"}}]},
            "tasks": [{"title": "A", "description": "a", "assignee": "clerk"}],
            "runner": {"image": "oma:1", "env": [{"name": "X", "value": "1"}]},
        }
    }


def test_the_work_digest_changes_with_what_runs_not_with_holds_or_placement() -> None:
    base = work_digest(_spec())
    assert base.startswith("sha256:") and work_digest(copy.deepcopy(_spec())) == base
    held = _spec()
    held["spec"].update(suspend=True, cancel=False, retryPolicy={"maxFailures": 0})
    held["spec"]["runner"]["nodeSelector"] = {"zone": "nowhere"}
    held["spec"]["runner"]["resources"] = {"limits": {"memory": "1Gi"}}
    assert work_digest(held) == base
    changes: tuple[Callable[[dict[str, Any]], object], ...] = (
        lambda s: s["team"]["agents"][0]["model"].update(script={"# Task: A": []}),
        lambda s: s["runner"]["env"].append({"name": "LEDGER", "value": "elsewhere"}),
        lambda s: s["runner"].update(image="oma:2"),
        lambda s: s["tasks"][0].update(description="pay BOB"),
        lambda s: s.update(approvals={"tools": []}),
    )
    for change in changes:
        changed = _spec()
        change(changed["spec"])
        assert work_digest(changed) != base, changed


def test_a_refused_retry_leaves_the_run_failed_and_is_handled_once() -> None:
    status: TeamRunStatus = {"phase": "Failed", "attempt": 2, "retries": [{"requested": "t1"}]}
    update = retry_refused(status, "t2", "its spec changed since approvals were given")
    assert "phase" not in update and "failures" not in update  # nothing else moves
    last = update["retries"][-1]
    assert (last["requested"], last["attempt"], last["reason"]) == ("t2", 2, RETRY_REFUSED)
    assert last["refusedAt"] and "spec changed" in last["message"]
    assert update["message"].startswith("retry refused: its spec changed")
    run = _run("Failed", "t2")
    run["status"] = cast(TeamRunStatus, {**status, **update})  # ``update``: a merge patch
    assert retry_requested(run) is None  # not looked at again; a new oma retry is


async def _approved(run_id: str = "r-1") -> ApprovalRecord:
    """A real ledger record: a tool call approved by carol."""
    request = tool_request(run_id, entry="pay")
    ledger = DurableApprovalLedger(InMemoryStore())
    await ledger.ensure_request(request)
    await ledger.decide(
        request_id=request.id,
        request_hash=request.request_hash,
        decision="approve",
        reviewer={"id": "carol"},
    )
    record = await ledger.get(request.id)
    assert record is not None
    return record


def _failed(digest: str | None, attempt: int = 2) -> TeamRunBody:
    run = teamrun_view(_spec())  # the spec alone so far: its metadata and status follow
    run["metadata"] = {
        "name": "pay",
        "namespace": "ns",
        "uid": "u-1",
        "annotations": {EDITORS_ANNOTATION: "bob\nmallory"},
    }
    run["status"] = {"phase": "Failed", "attempt": attempt}
    if digest is not None:
        run["status"]["workDigest"] = digest
    return run


async def test_a_retry_of_what_ran_or_of_what_never_ran_reads_no_store() -> None:
    """No kube client and no store are set up here: these answers come from the status."""
    assert await retry_refusal(_failed(work_digest(_spec()))) is None  # the spec it ran under
    assert await retry_refusal(_failed(None, attempt=0)) is None  # nothing ran


async def test_a_changed_spec_is_refused_only_while_approvals_stand() -> None:
    run = _failed("sha256:before")
    assert refusal_for(run, [], editors_recorded=True) is None  # a fixed spec goes ahead
    record = await _approved()
    refusal = refusal_for(run, [record], editors_recorded=True)
    assert refusal is not None and refusal.reason == RETRY_REFUSED
    assert refusal.message.startswith("its spec (edited by bob, mallory) changed since attempt 2")
    assert f"approvaldecision pay-{record.request.id.removeprefix('apr_')[:16]}" in (
        refusal.message
    )
    assert "(approved by carol)" in refusal.message
    assert "an approval holds only for the spec it was given under" in refusal.message
    unrecorded = refusal_for(run, [record], editors_recorded=False)
    assert unrecorded is not None and "edited by" not in unrecorded.message
    many = refusal_for(run, [record] * 7, editors_recorded=True)
    assert many is not None and "and 2 more approved work" in many.message


async def test_a_run_whose_spec_was_never_recorded_is_not_told_it_changed() -> None:
    refusal = refusal_for(_failed(None), [await _approved()], editors_recorded=True)
    assert refusal is not None and refusal.reason == SPEC_NOT_RECORDED
    assert "no record says which spec attempt 2 ran under" in refusal.message
    assert "changed" not in refusal.message
