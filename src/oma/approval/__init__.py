"""Durable approvals: requests bound to exact content by hash, decisions recorded once."""

from oma.approval.canonical import canonical_json
from oma.approval.errors import ApprovalErrorCode, DurableApprovalError
from oma.approval.models import (
    ApprovalDecisionRecord,
    ApprovalRequest,
    ApprovalScope,
    Reviewer,
    derive_request_id,
    hash_approval_request,
)
from oma.approval.requests import (
    create_approval_request,
    parse_approval_decision,
    parse_approval_request,
)

__all__ = [
    "ApprovalDecisionRecord",
    "ApprovalErrorCode",
    "ApprovalRequest",
    "ApprovalScope",
    "DurableApprovalError",
    "Reviewer",
    "canonical_json",
    "create_approval_request",
    "derive_request_id",
    "hash_approval_request",
    "parse_approval_decision",
    "parse_approval_request",
]
