"""The approval ledger: one row per request at ``__oma_approval__/<id>``; first decision wins.

A row is ``{"version": 1, "request": ..., "decision"?: ...}``. Requests are created with
``compare_and_set(key, None, ...)`` and decided with ``compare_and_set(key, <exact prior
row>, ...)``, so across every writer the store can have, exactly one decision lands and it is
never replaced. Stores without ``compare_and_set`` cannot hold durable approvals.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from oma import jsonutil
from oma.approval.canonical import canonical_json
from oma.approval.errors import DurableApprovalError
from oma.approval.models import (
    REASON_LIMIT,
    ApprovalDecisionRecord,
    ApprovalRequest,
    JsonDataModel,
    Reviewer,
)
from oma.approval.requests import parse_approval_decision, parse_approval_request
from oma.approval.words import WORDS, DecisionWord
from oma.jsstring import js_trim
from oma.store.base import MemoryStore, supports_compare_and_set
from oma.store.reserved import APPROVAL_KEY_PREFIX
from oma.timeutil import now_iso


def approval_key(request_id: str) -> str:
    """The store key of a request's row: ``__oma_approval__/<request_id>``."""
    return f"{APPROVAL_KEY_PREFIX}{request_id}"


class ApprovalRecord(JsonDataModel):
    """One approval row: the request and, once a reviewer decided, the decision."""

    version: Literal[1]
    request: ApprovalRequest
    decision: ApprovalDecisionRecord | None = None


class DurableApprovalLedger:
    """The approval rows of a store: creates requests and records the first decision on each;
    needs a store with ``compare_and_set``."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    @property
    def atomic(self) -> bool:
        """Whether its store can hold durable approvals (has ``compare_and_set``)."""
        return supports_compare_and_set(self.store)

    def assert_atomic_support(self) -> None:
        if not self.atomic:
            raise DurableApprovalError(
                "APPROVAL_ATOMIC_STORE_REQUIRED",
                f"Durable approvals need a store with compare_and_set; "
                f"{type(self.store).__name__} has none (a RedactingStore never has one).",
            )

    async def ensure_request(self, request: ApprovalRequest) -> ApprovalRecord:
        """Create the row, or return the existing one if it holds exactly this request."""
        request = parse_approval_request(request.to_wire())
        self.assert_atomic_support()
        assert supports_compare_and_set(self.store)
        record = ApprovalRecord(version=1, request=request)
        created = await self.store.compare_and_set(
            approval_key(request.id), None, record.to_json(), _request_metadata(request)
        )
        if created:
            return record
        existing = await self.get(request.id)
        if existing is None:  # deleted between the CAS and the read: try once more
            return await self.ensure_request(request)
        if canonical_json(existing.request.to_wire()) != canonical_json(request.to_wire()):
            raise DurableApprovalError(
                "APPROVAL_CONFLICT",
                f"Approval request {request.id} is already stored with different content.",
            )
        return existing

    async def get(self, request_id: str) -> ApprovalRecord | None:
        entry = await self.store.get(approval_key(request_id))
        if entry is None:
            return None
        return _parse_row(entry.value, request_id)

    async def records(self, run_id: str | None = None) -> list[ApprovalRecord]:
        """Every approval row in the store, or a run's (by the run id its request names), in
        one read of the store; a row that does not parse raises, naming it."""
        found = []
        for entry in await self.store.list():
            if entry.key.startswith(APPROVAL_KEY_PREFIX):
                record = _parse_row(entry.value, entry.key.removeprefix(APPROVAL_KEY_PREFIX))
                if run_id is None or record.request.run_id == run_id:
                    found.append(record)
        return found

    async def row_keys(self, run_id: str) -> list[str]:
        """The keys of a run's rows by the run id their metadata carries: also rows that no
        longer parse (for removing a run's rows, which need not be read)."""
        return [
            entry.key
            for entry in await self.store.list()
            if entry.key.startswith(APPROVAL_KEY_PREFIX)
            and (entry.metadata or {}).get("runId") == run_id
        ]

    async def decide(
        self,
        *,
        request_id: str,
        request_hash: str,
        decision: DecisionWord | str,
        reviewer: Reviewer | dict[str, Any],
        result: str | None = None,
        reason: str | None = None,
    ) -> ApprovalDecisionRecord:
        """Record the first decision. ``result`` goes with ``done`` on an uncertain tool call:
        what the reviewer found the call did, given to the model as the call's result.
        ``reason`` (at most 4096 characters) is why, kept with the decision."""
        try:
            who = reviewer if isinstance(reviewer, Reviewer) else Reviewer.model_validate(reviewer)
        except ValidationError as exc:
            raise DurableApprovalError(
                "APPROVAL_VALIDATION_ERROR", "Approval reviewer needs a non-empty id."
            ) from exc
        if decision not in WORDS:
            raise DurableApprovalError(
                "APPROVAL_VALIDATION_ERROR",
                "Approval decision must be 'approve' or 'reject' (or, for an uncertain tool "
                f"call, 'retry', 'done' or 'failed'), not {decision!r}.",
            )
        if reason is not None and len(reason) > REASON_LIMIT:
            raise DurableApprovalError(
                "APPROVAL_VALIDATION_ERROR",
                f"An approval reason holds at most {REASON_LIMIT} characters, not {len(reason)}.",
            )
        if result is not None and decision != "done":
            raise DurableApprovalError(
                "APPROVAL_VALIDATION_ERROR",
                "A result is recorded only with 'done' (an uncertain tool call that happened).",
            )
        key = approval_key(request_id)
        entry = await self.store.get(key)
        if entry is None:
            raise DurableApprovalError(
                "APPROVAL_NOT_FOUND", f"No approval request {request_id} in this store."
            )
        record = _parse_row(entry.value, request_id)
        if record.request.request_hash != request_hash:
            raise DurableApprovalError(
                "APPROVAL_STALE_DECISION",
                f"Approval request {request_id} has hash {record.request.request_hash}; the "
                f"decision was made on {request_hash}. Review the current content again.",
            )
        if record.decision is not None:
            raise DurableApprovalError(
                "APPROVAL_CONFLICT",
                f"Approval request {request_id} was already {record.decision.decision} by "
                f"{record.decision.reviewer.id}.",
            )
        if not supports_compare_and_set(self.store):
            self.assert_atomic_support()
        assert supports_compare_and_set(self.store)
        reviewer_wire = {"id": js_trim(who.id)}
        if who.display_name is not None:
            reviewer_wire["displayName"] = who.display_name
        raw: dict[str, Any] = {
            "version": 1,
            "requestId": record.request.id,
            "runId": record.request.run_id,
            "scope": record.request.scope,
            "requestHash": record.request.request_hash,
            "decision": WORDS[decision].verdict,
            "reviewer": reviewer_wire,
            "decidedAt": now_iso(),
        }
        raw.update(_resolution(record.request, decision, result))
        if reason is not None:
            raw["reason"] = reason
        made = parse_approval_decision(raw, record.request)
        updated = ApprovalRecord(version=1, request=record.request, decision=made)
        swapped = await self.store.compare_and_set(
            key, entry.value, updated.to_json(), _decision_metadata(made)
        )
        if not swapped:
            raise DurableApprovalError(
                "APPROVAL_CONFLICT", f"Approval request {request_id} was decided concurrently."
            )
        return made


def _resolution(request: ApprovalRequest, word: DecisionWord, result: str | None) -> dict[str, Any]:
    if request.scope != "uncertain_tool_call":
        if WORDS[word].settles_only:
            raise DurableApprovalError(
                "APPROVAL_VALIDATION_ERROR",
                f"'{word}' settles an uncertain tool call; request {request.id} is a "
                f"{request.scope} request: approve or reject it.",
            )
        return {}
    settled = {"resolution": WORDS[word].resolution}
    return settled | ({"result": result} if result is not None else {})


def _parse_row(text: str, request_id: str) -> ApprovalRecord:
    try:
        raw = jsonutil.loads(text)
    except (ValueError, RecursionError) as exc:  # the fallback parser recurses per level
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR", f"Approval row {request_id} is not valid JSON."
        ) from exc
    if not isinstance(raw, dict) or raw.get("version") != 1:
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR", f"Approval row {request_id} is not a version-1 record."
        )
    request = parse_approval_request(raw.get("request"))
    decision = (
        parse_approval_decision(raw["decision"], request)
        if raw.get("decision") is not None
        else None
    )
    if request.id != request_id:
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR",
            f"Approval row at {request_id} holds request {request.id}.",
        )
    return ApprovalRecord(version=1, request=request, decision=decision)


def _request_metadata(request: ApprovalRequest) -> dict[str, Any]:
    return {
        "namespace": "approval",
        "version": 1,
        "runId": request.run_id,
        "scope": request.scope,
        "requestHash": request.request_hash,
        "requestedAt": request.requested_at,
    }


def _decision_metadata(decision: ApprovalDecisionRecord) -> dict[str, Any]:
    return {
        "namespace": "approval",
        "version": 1,
        "runId": decision.run_id,
        "scope": decision.scope,
        "requestHash": decision.request_hash,
        "decision": decision.decision,
        "reviewerId": decision.reviewer.id,
        "decidedAt": decision.decided_at,
    }


async def decide_approval(
    store: MemoryStore,
    *,
    request_id: str,
    request_hash: str,
    decision: DecisionWord | str,
    reviewer: Reviewer | dict[str, Any],
    result: str | None = None,
    reason: str | None = None,
) -> ApprovalDecisionRecord:
    """Record a reviewer's decision on a stored request (``DurableApprovalLedger.decide``); a
    request already decided raises ``APPROVAL_CONFLICT``."""
    return await DurableApprovalLedger(store).decide(
        request_id=request_id,
        request_hash=request_hash,
        decision=decision,
        reviewer=reviewer,
        result=result,
        reason=reason,
    )


async def get_approval_record(store: MemoryStore, request_id: str) -> ApprovalRecord | None:
    """The row of ``request_id`` (its request and any decision), or None when there is none."""
    return await DurableApprovalLedger(store).get(request_id)
