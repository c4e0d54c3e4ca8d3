"""The operator's side of durable approvals: publish pending requests as ApprovalDecision
resources, record decisions in the run's store ledger, and resume once all are decided."""

from __future__ import annotations

from typing import Any

from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import ApprovalRecord, DurableApprovalLedger
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.store.base import MemoryStore
from oma.store.reserved import APPROVAL_KEY_PREFIX
from oma_operator.approval_resources import LABEL_REQUEST, decision_manifest
from oma_operator.client import Kube
from oma_operator.models import TeamRunSpec
from oma_operator.pods import run_id_of
from oma_operator.stores import STORES


async def run_records(store: MemoryStore, run_id: str) -> list[ApprovalRecord]:
    """The run's approval records: the requests its latest checkpoint names (one read each),
    or, for a checkpoint that names none (older formats), every approval row of the store."""
    ledger = DurableApprovalLedger(store)
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if isinstance(snapshot, CheckpointSnapshotV4) and snapshot.pending_approvals:
        ids = dict.fromkeys(
            [r.id for r in snapshot.pending_approvals]
            + [d.request_id for d in snapshot.approval_decisions]
        )
        found = [await ledger.get(request_id) for request_id in ids]
        return [r for r in found if r is not None and r.request.run_id == run_id]
    records = []
    for entry in await store.list():
        if entry.key.startswith(APPROVAL_KEY_PREFIX):
            record = await ledger.get(entry.key.removeprefix(APPROVAL_KEY_PREFIX))
            if record is not None and record.request.run_id == run_id:
                records.append(record)
    return records


def decision_word(scope: str, spec: dict[str, Any]) -> str:
    """The ledger's word for a resource's decision: an uncertain tool call is settled as retry
    (Approved), done or failed (Rejected, failed unless resolution says Done)."""
    approved = spec["decision"] == "Approved"
    if scope != "uncertain_tool_call":
        return "approve" if approved else "reject"
    if approved:
        return "retry"
    return "done" if spec.get("resolution") == "Done" else "failed"


async def sync_approvals(kube: Kube, teamrun: dict[str, Any], spec: TeamRunSpec) -> bool:
    """Create missing ApprovalDecisions, record decisions set on them, reflect decisions made
    elsewhere (e.g. with the CLI) into their status. True when nothing is left undecided."""
    namespace, name = teamrun["metadata"]["namespace"], teamrun["metadata"]["name"]
    store = await STORES.store_of(kube, namespace, spec)
    records = {r.request.id: r for r in await run_records(store, run_id_of(teamrun))}
    resources = {
        d["metadata"]["labels"].get(LABEL_REQUEST): d
        for d in await kube.list_decisions(namespace, name)
    }
    for request_id, record in records.items():
        resource = resources.get(request_id)
        if resource is None:
            if record.decision is None:
                await kube.create_decision(namespace, decision_manifest(teamrun, record.request))
            continue
        records[request_id] = await _apply(kube, store, resource, record)
    return all(record.decision is not None for record in records.values())


async def _apply(
    kube: Kube, store: MemoryStore, resource: dict[str, Any], record: ApprovalRecord
) -> ApprovalRecord:
    """Record the resource's decision in the ledger (first decision wins), then mirror the
    ledger's decision into the resource's status."""
    spec, meta = resource["spec"], resource["metadata"]
    status: dict[str, Any] = {}
    if record.decision is None and spec.get("decision") in ("Approved", "Rejected"):
        reviewer = (spec.get("reviewer") or "").strip()
        if not reviewer:
            status = {"recorded": False, "message": "set spec.reviewer to your user name"}
        else:
            try:
                await DurableApprovalLedger(store).decide(
                    request_id=spec["requestId"],
                    request_hash=spec["requestHash"],
                    decision=decision_word(record.request.scope, spec),
                    reviewer={"id": reviewer},
                    result=spec.get("result"),
                )
            except DurableApprovalError as exc:
                status = {"recorded": False, "message": f"{exc.code}: {exc}"}
            refreshed = await DurableApprovalLedger(store).get(record.request.id)
            record = refreshed or record
    if record.decision is not None:
        decision = record.decision
        status = {
            "recorded": True,
            "decision": decision.decision,
            "reviewer": decision.reviewer.id,
            "decidedAt": decision.decided_at,
            **({"resolution": decision.resolution} if decision.resolution else {}),
            **({"message": status["message"]} if "message" in status else {}),
        }
    if status and resource.get("status") != status:
        await kube.patch_decision_status(meta["namespace"], meta["name"], status)
    return record
