"""Stores: the ``MemoryStore`` contract and its implementations."""

from oma.store.base import (
    CompareAndSetStore,
    ExpiringStore,
    MemoryEntry,
    MemoryStore,
    Metadata,
    supports_compare_and_set,
    supports_expiry,
)
from oma.store.file import FileStore
from oma.store.memory import InMemoryStore
from oma.store.reserved import (
    APPROVAL_KEY_PREFIX,
    CHECKPOINT_KEY_PREFIX,
    RESERVED_KEY_PREFIXES,
    is_reserved_key,
)

__all__ = [
    "APPROVAL_KEY_PREFIX",
    "CHECKPOINT_KEY_PREFIX",
    "RESERVED_KEY_PREFIXES",
    "CompareAndSetStore",
    "ExpiringStore",
    "FileStore",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "Metadata",
    "is_reserved_key",
    "supports_compare_and_set",
    "supports_expiry",
]
