"""Which ApprovalDecision resources decide anything, what they show, and who may decide them
(the pure half; the API server's half is tests/cluster/test_approval_attacks_e2e.py)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from oma.approval.canonical import canonical_json
from oma.approval.ledger import ApprovalRecord
from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.approval.requests import create_approval_request
from oma_operator.approvals.rules.binding import (
    binding_problem,
    earlier_own,
    judge,
    mirrored_status,
    run_over_status,
    status_patch,
)
from oma_operator.approvals.rules.decision_view import ContentMismatch, verified_content, view
from oma_operator.approvals.rules.resources import decision_manifest, summary
from oma_operator.approvals.rules.reviewers import (
    excluded_reviewers,
    missing_creator,
    reviewer_problem,
    reviewers_for,
)
from oma_operator.resources.bodies import DecisionBody, DecisionStatus, TeamRunBody
from oma_operator.resources.models import (
    SUMMARY_LIMIT,
    ReviewerSet,
    TeamRunApprovals,
    TeamRunSpec,
    to_run_spec,
)

TEAMRUN: TeamRunBody = {
    "metadata": {
        "name": "pay",
        "namespace": "ns",
        "uid": "uid-pay",
        "annotations": {"oma.dev/created-by": "alice"},
    }
}


def _tool_request(run_id: str = "r1", tool: str = "wire", **input_: Any) -> ApprovalRequest:
    arguments = {"amount": 7, **input_}
    return create_approval_request(
        run_id=run_id,
        scope="tool_call",
        boundary="t-1:c1",
        content={
            "kind": "tool_call",
            "toolName": tool,
            "rawInput": arguments,
            "input": arguments,
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
        },
    )


def _published(manifest: DecisionBody) -> DecisionBody:
    """The resource as the API server stores it once the operator marked it."""
    resource = copy.deepcopy(manifest)
    resource["metadata"] |= {"uid": "uid-ad", "generation": 1, "resourceVersion": "5"}
    resource["status"] = {"verified": True, "decision": "Pending", "recorded": False}
    return resource


def test_a_short_request_has_its_whole_summary_and_exact_content() -> None:
    request = _tool_request()
    spec = decision_manifest(TEAMRUN, request)["spec"]
    assert spec["summary"].endswith(f"Content hash: {request.request_hash}")
    assert "CUT" not in spec["summary"]
    assert spec["content"] == canonical_json(request.content)
    assert spec["boundary"] == "t-1:c1"
    assert verified_content(spec) == request.content


def test_a_long_input_says_the_summary_is_cut_and_keeps_the_hash_and_the_whole_content() -> None:
    request = _tool_request(memo="x" * 20000, to="ACME-EVIL-IBAN")
    spec = decision_manifest(TEAMRUN, request)["spec"]
    text = spec["summary"]
    assert len(text) <= SUMMARY_LIMIT
    assert "ACME-EVIL-IBAN" not in text  # the tail did not fit in words...
    assert "SUMMARY CUT after" in text and "oma approve prints it" in text
    assert text.endswith(f"Content hash: {request.request_hash}")
    assert "ACME-EVIL-IBAN" in spec["content"]  # ...but the exact content holds it
    shown = "\n".join(
        view({"metadata": {"name": "n", "namespace": "ns"}, "spec": spec}, verified_content(spec))
    )
    assert '"to": "ACME-EVIL-IBAN"' in shown


def test_content_too_large_for_the_resource_is_left_out_and_the_summary_says_where_it_is() -> None:
    request = _tool_request(blob="y" * 300_000)
    spec = decision_manifest(TEAMRUN, request)["spec"]
    assert "content" not in spec
    assert f"oma approvals show {request.id} --store" in spec["summary"]
    assert verified_content(spec) is None


@pytest.mark.parametrize(
    "tamper",
    [
        lambda spec: spec | {"content": spec["content"].replace('"amount":7', '"amount":700')},
        lambda spec: spec | {"boundary": "t-2:c1"},
        lambda spec: spec | {"content": spec["content"].replace(":", ": ")},
        lambda spec: spec | {"content": "{not json"},
    ],
    ids=["edited-input", "other-boundary", "not-canonical", "not-json"],
)
def test_content_that_does_not_hash_to_the_request_is_refused(tamper: Any) -> None:
    spec = decision_manifest(TEAMRUN, _tool_request())["spec"]
    with pytest.raises(ContentMismatch):
        verified_content(tamper(spec))


def test_the_operators_own_resource_is_trusted_and_an_unmarked_pristine_one_adopted() -> None:
    manifest = decision_manifest(TEAMRUN, _tool_request())
    assert judge(_published(manifest), manifest).verdict == "trusted"
    unmarked = _published(manifest)
    del unmarked["status"]
    assert judge(unmarked, manifest).verdict == "adopt"
    decided_later = copy.deepcopy(unmarked)
    decided_later["metadata"]["generation"] = 2
    assert judge(decided_later, manifest).verdict == "replace"


def _forge(manifest: DecisionBody, **spec: Any) -> DecisionBody:
    forged = _published(manifest)
    del forged["status"]
    forged["spec"] |= spec
    return forged


@pytest.mark.parametrize(
    ("forgery", "verdict", "problem"),
    [
        (
            lambda m: _forge(m, decision="Approved", reviewer="alice"),
            "foreign",
            "not published by the operator",
        ),
        (lambda m: _forge(m, summary="Tool call: pay 1 cent."), "replace", "not published"),
        (lambda m: _forge(m, requestHash="f" * 64), "replace", "spec.requestHash"),
        (lambda m: _forge(m, teamRun="other"), "replace", "spec.teamRun"),
        (
            lambda m: {**_published(m), "spec": {**m["spec"], "reviewers": None}},
            "replace",
            "spec.reviewers",
        ),
    ],
    ids=["decided-by-someone", "other-summary", "other-hash", "other-teamrun", "no-reviewers"],
)
def test_a_resource_the_operator_did_not_publish_decides_nothing(
    forgery: Any, verdict: str, problem: str
) -> None:
    manifest = decision_manifest(TEAMRUN, _tool_request(), ReviewerSet(users=["alice"]))
    trust = judge(forgery(manifest), manifest)
    assert trust.verdict == verdict and problem in trust.problem


def test_a_resource_owned_by_another_teamrun_or_named_otherwise_is_not_bound() -> None:
    manifest = decision_manifest(TEAMRUN, _tool_request())
    other_owner = _published(manifest)
    other_owner["metadata"]["ownerReferences"][0]["uid"] = "uid-other"
    assert "not owned by TeamRun pay" in str(binding_problem(other_owner, manifest))
    renamed = _published(manifest)
    renamed["metadata"]["name"] = "pay-forged"
    assert "its name is not" in judge(renamed, manifest).problem
    # A resource labelled for this TeamRun, carrying another run's request, is nobody's.
    assert not earlier_own(
        {**renamed, "spec": {**renamed["spec"], "requestId": _tool_request("r2").id}}, TEAMRUN
    )
    assert earlier_own(_published(manifest), TEAMRUN)


def _record(decision: str | None = None, **extra: Any) -> ApprovalRecord:
    request = _tool_request()
    made = None
    if decision is not None:
        made = ApprovalDecisionRecord.model_validate(
            {
                "version": 1,
                "requestId": request.id,
                "runId": request.run_id,
                "scope": request.scope,
                "requestHash": request.request_hash,
                "decision": decision,
                "reviewer": {"id": "ops-cli"},
                "decidedAt": "2026-12-02T10:00:00.000Z",
                **extra,
            }
        )
    return ApprovalRecord(version=1, request=request, decision=made)


def test_the_status_mirrors_the_ledger_in_camel_case_with_the_reason() -> None:
    assert mirrored_status(_record()) == {
        "verified": True,
        "recorded": False,
        "decision": "Pending",
    }
    status = mirrored_status(_record("approved", reason="invoice checked"))
    assert status == {
        "verified": True,
        "recorded": True,
        "decision": "Approved",
        "reviewer": "ops-cli",
        "decidedAt": "2026-12-02T10:00:00.000Z",
        "reason": "invoice checked",
    }
    assert status_patch({"decision": "Pending", "message": "old"}, {"decision": "Approved"}) == {
        "decision": "Approved",
        "message": None,
    }
    assert status_patch(status, cast(DecisionStatus, dict(status))) is None  # an equal copy


def test_reviewers_per_gate_with_wildcards_and_a_default() -> None:
    approvals = TeamRunApprovals.model_validate(
        {
            "tools": ["wire", "email"],
            "reviewers": {
                "default": {"users": ["ops-lead"]},
                "tools": {"wire": {"groups": ["treasury"]}, "*": {"users": ["bob"]}},
                "plan": {"users": ["carol"]},
            },
        }
    )
    assert reviewers_for(approvals, _tool_request(tool="wire")) == ReviewerSet(groups=["treasury"])
    assert reviewers_for(approvals, _tool_request(tool="email")) == ReviewerSet(users=["bob"])
    plan = create_approval_request(
        run_id="r1",
        scope="plan",
        boundary="coordinator-plan",
        content={"kind": "plan", "continuation": "execute", "tasks": []},
    )
    assert reviewers_for(approvals, plan) == ReviewerSet(users=["carol"])
    only_default = TeamRunApprovals.model_validate({"reviewers": {"default": {"users": ["x"]}}})
    assert reviewers_for(only_default, plan) == ReviewerSet(users=["x"])
    assert reviewers_for(TeamRunApprovals(), plan) is None and reviewers_for(None, plan) is None
    with pytest.raises(ValueError, match="at least one reviewer"):
        ReviewerSet()


def test_separation_of_duties_excludes_the_creator_the_api_server_recorded() -> None:
    strict = TeamRunApprovals(separation_of_duties=True)
    assert excluded_reviewers(strict, TEAMRUN, recorded=True) == ["alice"]
    assert excluded_reviewers(TeamRunApprovals(), TEAMRUN, recorded=True) is None
    unknown: TeamRunBody = {"metadata": {"name": "pay", "namespace": "ns", "uid": "u"}}
    assert missing_creator(strict, TEAMRUN, recorded=True) is None
    assert "oma.dev/created-by" in str(missing_creator(strict, unknown, recorded=True))
    assert missing_creator(TeamRunApprovals(), unknown, recorded=True) is None


def test_separation_of_duties_excludes_everyone_who_changed_what_the_run_executes() -> None:
    """The API server appends each user who changed the spec's work fields to
    oma.dev/edited-by, one per line: each is as much an author as the creator."""
    strict = TeamRunApprovals(separation_of_duties=True)
    authors = {"oma.dev/created-by": "alice", "oma.dev/edited-by": "bob\nalice\ncarol@example.com"}
    edited: TeamRunBody = {
        "metadata": {"name": "pay", "namespace": "ns", "uid": "u", "annotations": authors}
    }
    assert excluded_reviewers(strict, edited, recorded=True) == [
        "alice",
        "bob",
        "carol@example.com",
    ]
    assert excluded_reviewers(strict, edited, recorded=False) is None  # not believed
    assert excluded_reviewers(TeamRunApprovals(), edited, recorded=True) is None
    problem = reviewer_problem("bob", ReviewerSet(users=["bob"]), ["alice", "bob"])
    assert problem is not None and "changed what it executes" in problem


def test_without_the_creator_policy_a_created_by_annotation_is_not_believed() -> None:
    """Without the policy, the author writes the annotation herself: naming someone else
    there would let her decide her own run. Separation of duties then refuses to run."""
    strict = TeamRunApprovals(separation_of_duties=True)
    forged: TeamRunBody = {"metadata": {
        "name": "pay", "namespace": "ns", "uid": "u",
        "annotations": {"oma.dev/created-by": "nobody"}}}  # fmt: skip
    assert excluded_reviewers(strict, forged, recorded=False) is None
    problem = missing_creator(strict, forged, recorded=False)
    assert problem is not None and "without the creator policy" in problem
    assert "OMA_CREATOR_POLICY" in problem and "approvals.creatorPolicy" in problem
    assert missing_creator(TeamRunApprovals(), forged, recorded=False) is None  # not asked for


def test_the_operator_rechecks_reviewer_names_it_can_see() -> None:
    users = ReviewerSet(users=["alice"])
    assert reviewer_problem("alice", users, None) is None
    assert "not a reviewer" in str(reviewer_problem("mallory", users, None))
    assert reviewer_problem("mallory", ReviewerSet(groups=["treasury"]), None) is None  # API's
    assert "separation of duties" in str(reviewer_problem("alice", users, ["alice"]))
    assert reviewer_problem("anyone", None, None) is None


def test_the_manifest_carries_reviewers_and_the_runner_never_sees_them() -> None:
    request = _tool_request()
    spec = decision_manifest(TEAMRUN, request, ReviewerSet(groups=["treasury"]), ["alice"])["spec"]
    assert spec["reviewers"] == {"groups": ["treasury"]}
    assert spec["excludedReviewers"] == ["alice"]
    teamrun = TeamRunSpec.model_validate(
        {
            "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
            "tasks": [{"title": "T", "description": "d", "assignee": "a"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
            "approvals": {
                "tools": ["wire"],
                "reviewers": {"default": {"users": ["alice"]}},
                "separationOfDuties": True,
            },
        }
    )
    assert to_run_spec(teamrun, "ns")["approvals"] == {
        "tools": ["wire"],
        "dispatch": [],
        "plan": False,
    }


def test_summary_of_every_scope_ends_with_the_hash() -> None:
    request = _tool_request()
    assert summary(request).splitlines()[-1] == f"Content hash: {request.request_hash}"


def test_a_pending_resource_of_a_run_that_is_over_says_so() -> None:
    current: DecisionStatus = {"verified": True, "recorded": False, "decision": "Pending"}
    quiet = run_over_status(current, {"decision": "Pending"}, "late", "Cancelled")
    assert quiet["decision"] == "Pending" and quiet["recorded"] is False
    assert quiet["message"].startswith("TeamRun late is Cancelled: nothing waits")
    late = run_over_status(current, {"decision": "Approved", "reviewer": "erin"}, "late", "Failed")
    assert late["message"].startswith("spec.decision Approved by erin was not recorded: ")
    assert (
        status_patch(
            late,
            run_over_status(late, {"decision": "Approved", "reviewer": "erin"}, "late", "Failed"),
        )
        is None
    )


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (lambda m: m.update(ownerReferences=[]), "owner reference"),
        (lambda m: m.update(finalizers=["example.com/keep"]), "finalizers were added"),
        (lambda m: m["labels"].pop("oma.dev/teamrun"), "oma labels"),
    ],
    ids=["owner-removed", "finalizer-added", "label-removed"],
)
def test_the_operators_own_resource_with_tampered_metadata_is_repaired_not_replaced(
    tamper: Any, said: str
) -> None:
    """A reviewer of another run removed a pending decision's owner reference and added a
    finalizer: the operator deleted it (stuck Terminating for good) and never published the
    request again. Verified by the operator and bound to the stored request, it is its own:
    the metadata is put back, and a decision on it still counts."""
    manifest = decision_manifest(TEAMRUN, _tool_request(), ReviewerSet(users=["alice"]))
    resource = _published(manifest)
    tamper(resource["metadata"])
    trust = judge(resource, manifest)
    assert trust.verdict == "repair" and said in trust.problem
    unverified = copy.deepcopy(resource)
    unverified["status"] = {}  # not marked by the operator: not its own to repair
    assert judge(unverified, manifest).verdict != "repair"
    other_request = copy.deepcopy(resource)
    other_request["spec"]["requestHash"] = "f" * 64
    assert judge(other_request, manifest).verdict != "repair"
