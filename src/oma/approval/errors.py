"""``DurableApprovalError`` and its codes (the reference's code strings, unchanged)."""

from __future__ import annotations

from typing import Literal

from oma.errors import OmaError

ApprovalErrorCode = Literal[
    "APPROVAL_ATOMIC_STORE_REQUIRED",
    "APPROVAL_CONFLICT",
    "APPROVAL_INTEGRITY_ERROR",
    "APPROVAL_NOT_FOUND",
    "APPROVAL_STALE_DECISION",
    "APPROVAL_VALIDATION_ERROR",
]


class DurableApprovalError(OmaError):
    """An approval request, decision or ledger row could not be used; ``code`` says why."""

    def __init__(self, code: ApprovalErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)
