"""Durable approvals: requests bound to exact content by hash, decisions recorded once."""

from oma.approval.canonical import canonical_json
from oma.approval.errors import ApprovalErrorCode, DurableApprovalError
from oma.approval.gates import (
    Allow,
    Deny,
    GateAnswer,
    InvalidGateDecisionError,
    Suspend,
    ToolCallGate,
    ToolCallGateContext,
)
from oma.approval.ledger import (
    ApprovalRecord,
    DurableApprovalLedger,
    approval_key,
    decide_approval,
    get_approval_record,
)
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
    "Allow",
    "ApprovalDecisionRecord",
    "ApprovalErrorCode",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalScope",
    "Deny",
    "DurableApprovalError",
    "DurableApprovalLedger",
    "GateAnswer",
    "InvalidGateDecisionError",
    "Reviewer",
    "Suspend",
    "ToolCallGate",
    "ToolCallGateContext",
    "approval_key",
    "canonical_json",
    "create_approval_request",
    "decide_approval",
    "derive_request_id",
    "get_approval_record",
    "hash_approval_request",
    "parse_approval_decision",
    "parse_approval_request",
]
