"""Stores: the ``MemoryStore`` contract and its implementations.

``RedisStore`` and ``PostgresStore`` are imported on first access, so ``import oma.store`` does
not load the Redis and PostgreSQL drivers for programs that never use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from oma.errors import StoreCapabilityError
from oma.extras import needs_extra
from oma.store.base import (
    ClosableStore,
    CompareAndSetStore,
    ExpiringStore,
    MemoryEntry,
    MemoryStore,
    Metadata,
    SizedStore,
    check_store,
    supports_compare_and_set,
    supports_expiry,
    supports_value_size,
)
from oma.store.capabilities import StoreCapabilities, capabilities_of
from oma.store.file import FileStore
from oma.store.journal import JournalEntry, JournalHead, JournalStore, supports_journal
from oma.store.memory import InMemoryStore
from oma.store.prefixed import PrefixedStore, memory_prefix, tenant_prefix
from oma.store.redacting import ExpiringRedactingStore, RedactingStore
from oma.store.remote import StoreAuthError, StoreUnavailableError, redact_url
from oma.store.reserved import (
    APPROVAL_KEY_PREFIX,
    CHECKPOINT_KEY_PREFIX,
    RESERVED_KEY_PREFIXES,
    is_reserved_key,
)
from oma.store.urls import open_store

if TYPE_CHECKING:
    from oma.store.postgres import PostgresStore
    from oma.store.redis import RedisStore

_LAZY = {"RedisStore": "oma.store.redis", "PostgresStore": "oma.store.postgres"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'oma.store' has no attribute {name!r}")
    with needs_extra(f"oma.store.{name}"):
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once; later lookups find it like any other name
    return value


__all__ = [
    "APPROVAL_KEY_PREFIX",
    "CHECKPOINT_KEY_PREFIX",
    "RESERVED_KEY_PREFIXES",
    "ClosableStore",
    "CompareAndSetStore",
    "ExpiringRedactingStore",
    "ExpiringStore",
    "FileStore",
    "InMemoryStore",
    "JournalEntry",
    "JournalHead",
    "JournalStore",
    "MemoryEntry",
    "MemoryStore",
    "Metadata",
    "PostgresStore",
    "PrefixedStore",
    "RedactingStore",
    "RedisStore",
    "SizedStore",
    "StoreAuthError",
    "StoreCapabilities",
    "StoreCapabilityError",
    "StoreUnavailableError",
    "capabilities_of",
    "check_store",
    "is_reserved_key",
    "memory_prefix",
    "open_store",
    "redact_url",
    "supports_compare_and_set",
    "supports_expiry",
    "supports_journal",
    "supports_value_size",
    "tenant_prefix",
]
