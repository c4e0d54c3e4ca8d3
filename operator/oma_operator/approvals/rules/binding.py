"""Which ApprovalDecision resources the operator trusts, and what their status says (pure).

A decision counts only on the resource the operator published for a request: found under its
deterministic name, owned by the TeamRun (uid), carrying the stored request's id, hash and scope
and the run's reviewers, and marked ``status.verified`` by the operator (users cannot write
status). The admission policy already refuses ApprovalDecisions created by anyone else; this is
the check that holds without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from oma.approval.ledger import ApprovalRecord
from oma.approval.words import RESOURCE_SPELLING
from oma_operator.approvals.rules.resources import decision_name
from oma_operator.resources.bodies import DecisionBody, DecisionStatus, TeamRunBody

# The fields that tie a resource to its request and to who may decide it.
BOUND_FIELDS = ("teamRun", "requestId", "requestHash", "scope", "reviewers", "excludedReviewers")
# Set only together with a decision (the API server refuses them on a Pending resource).
DECISION_FIELDS = ("reviewer", "reason", "resolution", "result")

Verdict = Literal["trusted", "adopt", "repair", "replace", "foreign"]


@dataclass(frozen=True)
class Trust:
    """``trusted``: the operator's own resource; ``adopt``: exactly what it would publish, left
    unmarked by a crash between creating and marking it; ``repair``: its own (verified,
    bound to the stored request) whose metadata someone changed (owner references, labels,
    finalizers): put back as published, decisions on it still count; ``replace``: not its
    own but still Pending (delete it and publish again); ``foreign``: not its own and decided
    (ignored, and said so in its status)."""

    verdict: Verdict
    problem: str = ""


def binding_problem(resource: DecisionBody, expected: DecisionBody) -> str | None:
    """Why ``resource`` is not bound like ``expected`` (the manifest the operator would
    publish), or None."""
    meta, spec = resource.get("metadata") or {}, resource.get("spec") or {}
    want_meta, want = expected["metadata"], expected["spec"]
    if meta.get("name") != want_meta["name"]:
        return f"its name is not {want_meta['name']}"
    owner_uid = want_meta["ownerReferences"][0]["uid"]
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if [o.get("uid") for o in owners] != [owner_uid]:
        return f"it is not owned by TeamRun {want['teamRun']} (uid {owner_uid})"
    for field in BOUND_FIELDS:
        if spec.get(field) != want.get(field):
            return (
                f"spec.{field} is {spec.get(field)!r}, the stored request's is {want.get(field)!r}"
            )
    return None


def judge(resource: DecisionBody, expected: DecisionBody) -> Trust:
    problem = binding_problem(resource, expected)
    verified = (resource.get("status") or {}).get("verified")
    tampered = metadata_changes(resource, expected)
    if verified is True and tampered and _spec_bound(resource, expected):
        # Only the operator writes status: verified means it published this very request.
        return Trust("repair", tampered)
    if problem is None and verified is True:
        return Trust("trusted")
    spec = resource.get("spec") or {}
    pending = spec.get("decision", "Pending") == "Pending"
    if problem is None and verified is None and pending and _pristine(resource, expected):
        return Trust("adopt")
    why = problem or "it was not published by the operator (changed before it was verified)"
    return Trust("replace" if pending else "foreign", why)


def metadata_changes(resource: DecisionBody, expected: DecisionBody) -> str:
    """What someone changed of the metadata the operator published ('' when nothing): the
    controller owner (the TeamRun's uid), the oma labels, finalizers (it publishes none, and a
    finalizer would keep a resource it deletes Terminating for good)."""
    meta, want = resource.get("metadata") or {}, expected["metadata"]
    changes = []
    owners = [o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if owners != [want["ownerReferences"][0]["uid"]]:
        changes.append("its owner reference to the TeamRun was changed")
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in want["labels"].items()):
        changes.append("its oma labels were changed")
    if meta.get("finalizers"):
        changes.append(f"finalizers were added ({', '.join(meta['finalizers'])})")
    return "; ".join(changes)


def _spec_bound(resource: DecisionBody, expected: DecisionBody) -> bool:
    spec, want = resource.get("spec") or {}, expected["spec"]
    same_name = (resource.get("metadata") or {}).get("name") == expected["metadata"]["name"]
    return same_name and all(spec.get(field) == want.get(field) for field in BOUND_FIELDS)


def _pristine(resource: DecisionBody, expected: DecisionBody) -> bool:
    spec = resource.get("spec") or {}
    generation = int((resource.get("metadata") or {}).get("generation") or 1)
    return generation == 1 and spec == expected["spec"]


def earlier_own(resource: DecisionBody, teamrun: TeamRunBody) -> bool:
    """Whether ``resource`` is one the operator published for an earlier request of this
    TeamRun (verified, and named, owned and labelled as it publishes them)."""
    meta, spec = resource.get("metadata") or {}, resource.get("spec") or {}
    owner = teamrun["metadata"]
    owners = [o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return (
        (resource.get("status") or {}).get("verified") is True
        and spec.get("teamRun") == owner["name"]
        and meta.get("name") == decision_name(owner["name"], str(spec.get("requestId")))
        and owners == [owner["uid"]]
    )


def ignored_status(problem: str) -> DecisionStatus:
    return {
        "verified": False,
        "recorded": False,
        "message": f"ignored: {problem}; this resource decides nothing",
    }


def run_over_status(
    current: DecisionStatus, spec: dict[str, Any], teamrun: str, phase: str
) -> DecisionStatus:
    """A Pending resource of a run that is over: nothing waits for it, and a decision set on
    it now (``spec``) is not recorded (the ledger keeps the request undecided)."""
    over = f"TeamRun {teamrun} is {phase}: nothing waits for this decision any more"
    decided = spec.get("decision")
    if decided and decided != "Pending":
        message = f"spec.decision {decided} by {spec.get('reviewer')} was not recorded: {over}"
    else:
        message = f"{over}, and one set now is not recorded"
    return {**current, "recorded": False, "message": message}


def mirrored_status(
    record: ApprovalRecord, message: str | None = None, expires: str | None = None
) -> DecisionStatus:
    """The ledger's state of the request, for the resource's status (CamelCase, as in spec);
    ``expires``: when an undecided request expires (not shown once it is decided)."""
    status: DecisionStatus = {"verified": True, "recorded": record.decision is not None}
    if expires is not None and record.decision is None:  # gone once decided: decidedAt says
        status["expiresAt"] = expires
    decision = record.decision
    if decision is None:
        status["decision"] = "Pending"
    else:
        status["decision"] = RESOURCE_SPELLING[decision.decision]
        status["reviewer"] = decision.reviewer.id
        status["decidedAt"] = decision.decided_at
        if decision.resolution:
            status["resolution"] = RESOURCE_SPELLING[decision.resolution]
        if decision.reason is not None:
            status["reason"] = decision.reason
    if message:
        status["message"] = message
    return status


def status_patch(current: DecisionStatus, wanted: DecisionStatus) -> dict[str, Any] | None:
    """A merge patch turning ``current`` status into ``wanted`` (keys not wanted are removed),
    or None when they are equal."""
    if current == wanted:
        return None
    return {**wanted, **{key: None for key in current if key not in wanted}}
