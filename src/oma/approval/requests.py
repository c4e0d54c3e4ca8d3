"""Creating approval requests and reading requests/decisions with integrity errors."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import ValidationError

from oma.approval.canonical import canonical_json
from oma.approval.errors import DurableApprovalError
from oma.approval.models import (
    ApprovalDecisionRecord,
    ApprovalRequest,
    ApprovalScope,
    derive_request_id,
    hash_approval_request,
    validation_summary,
)
from oma.jsstring import js_trim
from oma.timeutil import now_iso

_SCOPES: tuple[ApprovalScope, ...] = typing.get_args(ApprovalScope)


def create_approval_request(
    *,
    run_id: str,
    scope: ApprovalScope,
    boundary: str,
    content: dict[str, Any],
    reason: str | None = None,
    requested_at: str | None = None,
) -> ApprovalRequest:
    """A new request whose id and hash bind ``content`` (``requested_at`` defaults to now)."""
    run_id, boundary = js_trim(run_id), js_trim(boundary)
    if not run_id:
        raise DurableApprovalError("APPROVAL_VALIDATION_ERROR", "Approval runId is empty.")
    if not boundary:
        raise DurableApprovalError("APPROVAL_VALIDATION_ERROR", "Approval boundary is empty.")
    if scope not in _SCOPES:
        raise DurableApprovalError("APPROVAL_VALIDATION_ERROR", f"Unknown scope {scope!r}.")
    if content.get("kind") != scope:
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR",
            f"Approval content kind {content.get('kind')!r} does not match scope {scope!r}.",
        )
    canonical_json(content)  # refuses non-JSON content with APPROVAL_VALIDATION_ERROR
    request_hash = hash_approval_request(scope, boundary, content)
    raw: dict[str, Any] = {
        "version": 1,
        "id": derive_request_id(run_id, scope, boundary, request_hash),
        "runId": run_id,
        "scope": scope,
        "boundary": boundary,
        "requestHash": request_hash,
        "requestedAt": requested_at or now_iso(),
        "content": content,
    }
    if reason is not None:
        raw["reason"] = reason
    try:
        return ApprovalRequest.model_validate(raw)
    except ValidationError as exc:
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR", f"Invalid approval request: {validation_summary(exc)}"
        ) from exc


def parse_approval_request(raw: Any) -> ApprovalRequest:
    """Read a stored request; any malformation or tampering is ``APPROVAL_INTEGRITY_ERROR``."""
    try:
        return ApprovalRequest.model_validate(raw)
    except ValidationError as exc:
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR", f"Invalid approval request: {validation_summary(exc)}"
        ) from exc


def parse_approval_decision(
    raw: Any, request: ApprovalRequest | None = None
) -> ApprovalDecisionRecord:
    """Read a stored decision; any malformation, or a decision that does not bind ``request``, is
    ``APPROVAL_INTEGRITY_ERROR``."""
    try:
        decision = ApprovalDecisionRecord.model_validate(raw)
    except ValidationError as exc:
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR", f"Invalid approval decision: {validation_summary(exc)}"
        ) from exc
    if request is not None and not decision.binds(request):
        raise DurableApprovalError(
            "APPROVAL_INTEGRITY_ERROR",
            f"Approval decision for {decision.request_id} does not bind the pending request "
            f"{request.id}.",
        )
    return decision
