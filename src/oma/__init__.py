"""oma: durable multi-agent LLM runs. The names below are the public API."""

from oma.approval import (
    ApprovalDecisionRecord,
    ApprovalRequest,
    DurableApprovalError,
    create_approval_request,
    hash_approval_request,
)
from oma.errors import (
    CheckpointDecodeError,
    CheckpointError,
    CheckpointValidationError,
    OmaError,
    StoreCorruptError,
    StoreError,
)
from oma.store import FileStore, InMemoryStore, MemoryEntry, MemoryStore

__version__ = "0.1.0"

__all__ = [
    "ApprovalDecisionRecord",
    "ApprovalRequest",
    "CheckpointDecodeError",
    "CheckpointError",
    "CheckpointValidationError",
    "DurableApprovalError",
    "FileStore",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "OmaError",
    "StoreCorruptError",
    "StoreError",
    "__version__",
    "create_approval_request",
    "hash_approval_request",
]
