"""Key prefixes the engine reserves for itself inside any store.

Shared memory never reads, lists, restores or deletes keys under these prefixes, so one store can
hold agent memory, checkpoints and approval rows side by side.
"""

from __future__ import annotations

CHECKPOINT_KEY_PREFIX = "__oma_checkpoint__/"
APPROVAL_KEY_PREFIX = "__oma_approval__/"
# Parts of a store (oma.store.prefixed): a tenant's keys, a run's (or a named) shared memory.
TENANT_KEY_PREFIX = "__oma_tenant__/"
MEMORY_KEY_PREFIX = "__oma_memory__/"
RESERVED_KEY_PREFIXES = (
    CHECKPOINT_KEY_PREFIX,
    APPROVAL_KEY_PREFIX,
    TENANT_KEY_PREFIX,
    MEMORY_KEY_PREFIX,
)


def is_reserved_key(key: str) -> bool:
    """True for a key under one of the engine's prefixes (checkpoints, approvals, store parts)."""
    return key.startswith(RESERVED_KEY_PREFIXES)
