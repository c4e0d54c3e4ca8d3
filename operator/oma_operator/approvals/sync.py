"""The operator's side of durable approvals: publish pending requests as ApprovalDecision
resources, record the decisions set on the resources it published in the run's store ledger,
mirror the ledger into their status, and resume once all are decided.

Only a resource that ``rules.binding.judge`` trusts decides anything; any other is left
deciding nothing, and its status and a TeamRun Event say why.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import ApprovalRecord, DurableApprovalLedger
from oma.approval.words import RESOURCE_SPELLING, DecisionWord, word_of
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.checkpoint.keys import checkpoint_key
from oma.store.base import MemoryStore
from oma.store.journal import JournalHead, supports_journal
from oma.timeutil import format_iso
from oma_operator import events, runtime
from oma_operator.approvals.rules.binding import (
    earlier_own,
    ignored_status,
    judge,
    mirrored_status,
    run_over_status,
    status_patch,
)
from oma_operator.approvals.rules.expiry import (
    EXPIRED_REVIEWER,
    expires_at,
    expiry_reason,
    expiry_word,
)
from oma_operator.approvals.rules.resources import decision_manifest
from oma_operator.approvals.rules.reviewers import (
    excluded_reviewers,
    missing_creator,
    reviewer_problem,
    reviewers_for,
)
from oma_operator.k8s.client import Kube
from oma_operator.k8s.errors import CHANGED_OR_GONE, KubeConflict
from oma_operator.resources.bodies import DecisionBody, ObjectMeta, TeamRunBody
from oma_operator.resources.models import ReviewerSet, TeamRunApprovals, TeamRunSpec
from oma_operator.resources.specs import run_id_of
from oma_operator.stores import STORES

log = logging.getLogger(__name__)


async def run_records(
    store: MemoryStore, run_id: str, owner: str = "", waiting_in: int | None = None
) -> list[ApprovalRecord]:
    """The run's approval records: the requests its latest checkpoint names (one read each),
    or, for a checkpoint that names none (older formats), every approval row of the store.

    The ids come from the journal's head where the runner wrote them there (a few hundred
    bytes): a run waiting with a checkpoint of 100 MB is not read whole every poll. Otherwise
    the checkpoint is read once per journal version, or, in the snapshot layout (no head),
    once per attempt the run waits in (``waiting_in``: its requests do not change until the
    next one). ``owner``, the TeamRun's uid, keeps two tenants' runs of one run id apart."""
    ledger = DurableApprovalLedger(store)
    head = await store.journal_head(checkpoint_key(run_id)) if supports_journal(store) else None
    ids = _ids_in_head(head)
    if ids is None:
        key = (owner, run_id, head.version) if head is not None else None
        if key is None and owner and waiting_in is not None:
            key = (owner, run_id, f"waiting in attempt {waiting_in}")
        ids = await _ids_in_checkpoint(store, run_id, key)
    if ids:
        found = [await ledger.get(request_id) for request_id in dict.fromkeys(ids)]
        return [r for r in found if r is not None and r.request.run_id == run_id]
    return await ledger.records(run_id)


def _ids_in_head(head: JournalHead | None) -> list[str] | None:
    """The request ids the journal's head names (pending, then decided); None when it names
    none (no journal, or one written by an older runner): then the checkpoint is read."""
    approvals = ((head.metadata or {}) if head is not None else {}).get("approvals")
    if not isinstance(approvals, dict):
        return None
    ids = [*(approvals.get("pending") or []), *(approvals.get("decided") or [])]
    return [i for i in ids if isinstance(i, str)] or None


# (TeamRun uid, run id, journal version or the waiting attempt) -> the ids its checkpoint
# names; the uid keeps two tenants' runs of one run id apart.
_IDS_READ: OrderedDict[tuple[str, str, str], list[str]] = OrderedDict()
IDS_READ_KEPT = 1024


async def _ids_in_checkpoint(
    store: MemoryStore, run_id: str, key: tuple[str, str, str] | None
) -> list[str]:
    if key is not None and key in _IDS_READ:
        _IDS_READ.move_to_end(key)
        return _IDS_READ[key]
    ids: list[str] = []
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if isinstance(snapshot, CheckpointSnapshotV4) and snapshot.pending_approvals:
        ids = [r.id for r in snapshot.pending_approvals]
        ids += [d.request_id for d in snapshot.approval_decisions]
    if key is not None:
        _IDS_READ[key] = ids
        while len(_IDS_READ) > IDS_READ_KEPT:
            _IDS_READ.popitem(last=False)
    return ids


def decision_word(scope: str, spec: dict[str, Any]) -> DecisionWord:
    """The ledger's word for a resource's decision (``oma.approval.words``)."""
    return word_of(scope, spec["decision"], spec.get("resolution"))


async def sync_approvals(kube: Kube, teamrun: TeamRunBody, spec: TeamRunSpec) -> bool:
    """Publish missing ApprovalDecisions, record decisions set on trusted ones, mirror the
    ledger (decisions made elsewhere too, e.g. with the CLI) into their status, report the
    untrusted ones. True when nothing is left undecided."""
    namespace, name = teamrun["metadata"]["namespace"], teamrun["metadata"]["name"]
    unknown = missing_creator(spec.approvals, teamrun, runtime.settings().creator_recorded)
    if unknown is not None:  # publish nothing its creator could decide
        log.warning("%s/%s: its requests are not published: %s", namespace, name, unknown)
        return False
    store = await STORES.store_of(kube, namespace, spec)
    status = teamrun.get("status") or {}
    waiting_in = None
    if status.get("phase") == "AwaitingApproval":  # no runner writes its checkpoint meanwhile
        waiting_in = int(status.get("attempt") or 0)
    owner = str(teamrun["metadata"].get("uid") or "")
    found = {d["metadata"]["name"]: d for d in await kube.list_decisions(namespace, name)}
    try:
        found_records = await run_records(store, run_id_of(teamrun), owner, waiting_in)
    except DurableApprovalError as exc:  # a row someone rewrote (or a store that lost part)
        await _ledger_unreadable(kube, teamrun, list(found.values()), str(exc))
        return False
    records = {r.request.id: r for r in found_records}
    excluded = excluded_reviewers(spec.approvals, teamrun, runtime.settings().creator_recorded)
    published: set[str] = set()
    for request_id, record in records.items():
        reviewers = reviewers_for(spec.approvals, record.request)
        expected = decision_manifest(teamrun, record.request, reviewers, excluded)
        resource_name = expected["metadata"]["name"]
        published.add(resource_name)
        resource = found.get(resource_name)
        expiry = expires_at(record.request, spec.approvals)
        if record.decision is None and _past(expiry) and spec.approvals is not None:
            # Whatever became of its resource (never published, taken by someone else's):
            # expiry is the request's, and a decision set from now on comes too late.
            record = records[request_id] = await _expire(store, record, spec.approvals)
        if resource is None:
            if record.decision is not None:
                continue  # decided elsewhere before it was ever published
            resource = await _publish(kube, expected, record, expiry)
        if resource is not None:
            judged = Judged(resource, expected, record, reviewers, excluded, expiry)
            records[request_id] = await _settle(kube, store, teamrun, judged, spec.approvals)
    for resource_name, resource in found.items():
        if resource_name not in published and not earlier_own(resource, teamrun):
            await _ignore(
                kube,
                teamrun,
                resource,
                "it is not the resource of a request of "
                f"TeamRun {name} (ApprovalDecisions are published by the operator)",
            )
    return all(record.decision is not None for record in records.values())


async def _publish(
    kube: Kube, expected: DecisionBody, record: ApprovalRecord, expiry: datetime | None
) -> DecisionBody | None:
    """Create the resource and mark it as the operator's own at once (by uid: a reviewer's
    decision right after the create does not stand in the way). On a taken name, the resource
    found there, to be judged."""
    meta = expected["metadata"]
    try:
        created = await kube.create_decision(meta["namespace"], expected)
    except KubeConflict:
        return await kube.get_decision(meta["namespace"], meta["name"])
    status = mirrored_status(record, expires=_iso(expiry))
    try:
        await kube.patch_decision_status(
            meta["namespace"], meta["name"], status, uid=created["metadata"]["uid"]
        )
    except CHANGED_OR_GONE:
        return None  # deleted meanwhile: the next round publishes it again
    return {**created, "status": status}


@dataclass(frozen=True)
class Judged:
    """A published resource, what the operator would publish for its request, the request's
    record in the ledger, who may decide it, and when it expires."""

    resource: DecisionBody
    expected: DecisionBody
    record: ApprovalRecord
    reviewers: ReviewerSet | None
    excluded: list[str] | None
    expiry: datetime | None


async def _settle(
    kube: Kube,
    store: MemoryStore,
    teamrun: TeamRunBody,
    judged: Judged,
    approvals: TeamRunApprovals | None,
) -> ApprovalRecord:
    """Record a trusted resource's decision in the ledger (first decision wins), or expiry's
    once the request expired undecided, and mirror the ledger into its status; replace or
    report a resource that is not the operator's."""
    resource, expected, record = judged.resource, judged.expected, judged.record
    meta = resource["metadata"]
    trust = judge(resource, expected)
    if trust.verdict == "repair":
        await kube.restore_decision_metadata(
            meta["namespace"], meta["name"], meta["uid"], expected["metadata"]
        )
        await events.warn(
            teamrun,
            "ApprovalDecisionRepaired",
            f"{meta['name']}: {trust.problem}; put back as the operator published it (its "
            "request and any decision on it are unchanged)",
        )
        repaired: ObjectMeta = {**meta, **expected["metadata"], "finalizers": []}
        trust = judge({**resource, "metadata": repaired}, expected)
    if trust.verdict == "replace":
        as_judged = meta["resourceVersion"]
        if meta.get("finalizers"):  # someone else's: it would stay Terminating for good
            restored = await kube.restore_decision_metadata(
                meta["namespace"], meta["name"], meta["uid"], expected["metadata"]
            )
            if (restored.get("spec") or {}).get("decision", "Pending") != "Pending":
                return record  # decided meanwhile: the next round judges it as it is now
            as_judged = restored["metadata"]["resourceVersion"]
        gone = await kube.delete_decision(meta["namespace"], meta["name"], meta["uid"], as_judged)
        if not gone:
            return record  # changed since it was judged (decided?): the next round judges it
        await events.warn(
            teamrun,
            "ApprovalDecisionReplaced",
            f"{meta['name']} was not published by the operator ({trust.problem}): deleted it and "
            "published the request again",
        )
        return record  # the next round publishes it (the name is free once it is gone)
    if trust.verdict == "foreign":
        await _ignore(
            kube,
            teamrun,
            resource,
            f"{trust.problem}; delete it and the operator publishes the request again",
        )
        return record
    message = None
    spec = resource.get("spec") or {}
    if record.decision is None and _past(judged.expiry) and approvals is not None:
        record = await _expire(store, record, approvals)  # expired since the check above
        message = _not_recorded(spec, record)
    elif record.decision is None and spec.get("decision") in ("Approved", "Rejected"):
        record, message = await _record(store, spec, record, judged.reviewers, judged.excluded)
    elif record.decision is not None:
        message = _not_recorded(spec, record)
    wanted = mirrored_status(record, message, _iso(judged.expiry))
    patch = status_patch((resource.get("status") or {}), wanted)
    if patch is not None:
        version = meta["resourceVersion"] if trust.verdict == "adopt" else None
        # Changed or gone meanwhile: judged next round.
        with contextlib.suppress(*CHANGED_OR_GONE):
            await kube.patch_decision_status(
                meta["namespace"], meta["name"], patch, uid=meta["uid"], resource_version=version
            )
    return record


async def _record(
    store: MemoryStore,
    spec: dict[str, Any],
    record: ApprovalRecord,
    reviewers: ReviewerSet | None,
    excluded: list[str] | None,
) -> tuple[ApprovalRecord, str | None]:
    reviewer = (spec.get("reviewer") or "").strip()
    if not reviewer:
        return record, "not recorded: set spec.reviewer to your user name"
    problem = reviewer_problem(reviewer, reviewers, excluded)
    if problem is not None:
        return record, f"not recorded: {problem}"
    ledger = DurableApprovalLedger(store)
    message = None
    try:
        await ledger.decide(
            request_id=record.request.id,
            request_hash=spec["requestHash"],
            decision=decision_word(record.request.scope, spec),
            reviewer={"id": reviewer},
            result=spec.get("result"),
            reason=spec.get("reason"),
        )
    except DurableApprovalError as exc:
        message = f"not recorded: {exc.code}: {exc}"
    return await ledger.get(record.request.id) or record, message


async def _expire(
    store: MemoryStore, record: ApprovalRecord, approvals: TeamRunApprovals
) -> ApprovalRecord:
    """Decide an expired request as ``onExpiry`` says, by the reviewer ``expired``; a decision
    recorded meanwhile (by the CLI, in the store) stands instead."""
    ledger = DurableApprovalLedger(store)
    with contextlib.suppress(DurableApprovalError):  # decided meanwhile: first decision wins
        await ledger.decide(
            request_id=record.request.id,
            request_hash=record.request.request_hash,
            decision=expiry_word(record.request, approvals),
            reviewer={"id": EXPIRED_REVIEWER},
            reason=expiry_reason(approvals),
        )
    return await ledger.get(record.request.id) or record


def _past(moment: datetime | None) -> bool:
    return moment is not None and datetime.now(UTC) >= moment


def _iso(moment: datetime | None) -> str | None:
    return format_iso(moment) if moment is not None else None


def _not_recorded(spec: dict[str, Any], record: ApprovalRecord) -> str | None:
    """What to say when the resource's own decision differs from the one the ledger holds
    (someone decided first, e.g. in the store)."""
    decision = record.decision
    if decision is None or spec.get("decision") not in ("Approved", "Rejected"):
        return None
    if (
        spec["decision"] == RESOURCE_SPELLING[decision.decision]
        and spec.get("reviewer") == decision.reviewer.id
    ):
        return None
    return (
        f"spec.decision {spec['decision']} by {spec.get('reviewer')} was not recorded: the "
        f"request was already {decision.decision} by {decision.reviewer.id}"
    )


async def close_pending(kube: Kube, teamrun: TeamRunBody) -> None:
    """Say on each still-Pending ApprovalDecision of a run that is over (cancelled while it
    waited, failed) that nothing waits for it: a reviewer who opens it sees why, and a decision
    set on it is not mistaken for one that counts."""
    meta, phase = teamrun["metadata"], (teamrun.get("status") or {}).get("phase", "")
    for resource in await kube.list_decisions(meta["namespace"], meta["name"]):
        current = resource.get("status") or {}
        if current.get("decision", "Pending") != "Pending":
            continue
        wanted = run_over_status(current, resource.get("spec") or {}, meta["name"], phase)
        patch = status_patch(current, wanted)
        if patch is None:
            continue
        where = resource["metadata"]
        # Changed or gone meanwhile: the next round sees it.
        with contextlib.suppress(*CHANGED_OR_GONE):
            await kube.patch_decision_status(
                where["namespace"], where["name"], patch, uid=where["uid"]
            )


async def _ledger_unreadable(
    kube: Kube, teamrun: TeamRunBody, resources: list[DecisionBody], problem: str
) -> None:
    """The run's approval rows in its store cannot be trusted: nothing is recorded, no request
    is decided, and every undecided resource of the run says so (a reviewer's decision on one
    is reported as not recorded, at once, instead of waiting for a record that never comes)."""
    over = (
        f"the run's approval requests in its store cannot be read ({problem}): nothing is "
        "decided until the store is repaired"
    )
    warned = False
    for resource in resources:
        meta, spec = resource["metadata"], resource.get("spec") or {}
        status = resource.get("status") or {}
        if status.get("verified") is not True or status.get("recorded"):
            continue
        decided = spec.get("decision")
        if decided and decided != "Pending":
            message = f"spec.decision {decided} by {spec.get('reviewer')} was not recorded: {over}"
        else:
            message = f"a decision set now is not recorded: {over}"
        patch = status_patch(status, {**status, "recorded": False, "message": message})
        if patch is None:
            continue
        if not warned:
            await events.warn(teamrun, "ApprovalLedgerUnreadable", over)
            warned = True
        with contextlib.suppress(*CHANGED_OR_GONE):
            await kube.patch_decision_status(
                meta["namespace"], meta["name"], patch, uid=meta["uid"]
            )


async def _ignore(kube: Kube, teamrun: TeamRunBody, resource: DecisionBody, problem: str) -> None:
    """Say in its status (and once in a TeamRun Event) that ``resource`` decides nothing."""
    meta = resource["metadata"]
    patch = status_patch((resource.get("status") or {}), ignored_status(problem))
    if patch is None:
        return
    await events.warn(teamrun, "ApprovalDecisionIgnored", f"{meta['name']}: {problem}")
    # Changed or gone meanwhile: the next round sees it.
    with contextlib.suppress(*CHANGED_OR_GONE):
        await kube.patch_decision_status(meta["namespace"], meta["name"], patch, uid=meta["uid"])
