"""The one persistence contract: a string-valued key/value store with optional atomic swap.

Shared memory, checkpoints and approval rows all go through ``MemoryStore``. Callers serialise;
values are always strings. ``created_at`` of a key survives updates; metadata is copied on the
way in and on the way out so later caller mutation never leaks into the store. What a store
offers beyond the required methods it declares (``oma.store.capabilities``); the ``supports_*``
guards read that declaration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, TypeGuard, runtime_checkable

from pydantic import BaseModel, ConfigDict

from oma.errors import StoreCapabilityError
from oma.store.capabilities import StoreCapabilities, capabilities_of

Metadata = dict[str, Any]


class MemoryEntry(BaseModel):
    """One stored key. ``expires_at_turn`` is recorded, never enforced, by stores."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str
    metadata: Metadata | None = None
    created_at: datetime
    expires_at_turn: int | None = None


Entries = list[MemoryEntry]


@runtime_checkable
class MemoryStore(Protocol):
    """Required surface of every store. ``list`` returns entries in first-insertion order."""

    async def get(self, key: str) -> MemoryEntry | None: ...

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None: ...

    async def list(self) -> Entries: ...

    async def delete(self, key: str) -> None: ...

    async def clear(self) -> None: ...


@runtime_checkable
class CompareAndSetStore(MemoryStore, Protocol):
    """A store that can swap a value atomically across every writer it can have.

    ``expected=None`` means "the key must be absent". A mismatch returns ``False``; it never
    raises. Stores that cannot guarantee atomicity over their writer scope do not offer this.
    """

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool: ...


@runtime_checkable
class ExpiringStore(MemoryStore, Protocol):
    """A store that records a turn-count expiry next to a value (shared memory enforces it)."""

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None: ...


@runtime_checkable
class SizedStore(MemoryStore, Protocol):
    """A store that tells a value's size without reading it."""

    async def value_size(self, key: str) -> int | None:
        """The bytes of ``key``'s value as stored (UTF-8), or None when there is none."""
        ...


@runtime_checkable
class ClosableStore(Protocol):
    """A store that holds connections or pools, closed by ``aclose()`` (wrappers close what they
    wrap). Optional: a store without it holds nothing to close. Not a capability: nothing about
    a run depends on it, so it is not declared (``StoreCapabilities``), only looked for."""

    async def aclose(self) -> None: ...


async def close_store(store: object) -> None:
    """Close ``store`` if it is a ``ClosableStore``. Every caller that opened a store closes it
    through this."""
    if isinstance(store, ClosableStore):
        await store.aclose()


REQUIRED_METHODS = ("get", "set", "list", "delete", "clear")


def supports_compare_and_set(store: MemoryStore) -> TypeGuard[CompareAndSetStore]:
    """True when ``store`` declares an atomic ``compare_and_set`` (``capabilities_of``)."""
    return capabilities_of(store).compare_and_set


def supports_expiry(store: MemoryStore) -> TypeGuard[ExpiringStore]:
    """True when ``store`` declares ``set_with_expiry`` (``capabilities_of``)."""
    return capabilities_of(store).expiry


def supports_value_size(store: MemoryStore) -> TypeGuard[SizedStore]:
    """True when ``store`` declares ``value_size`` (``capabilities_of``)."""
    return capabilities_of(store).value_size


def check_store(store: object, what: str = "store") -> StoreCapabilities:
    """``store``'s capabilities, once it is known to be a usable store: every required method
    callable and every capability it claims backed by its methods; otherwise a
    ``StoreCapabilityError`` (also a ``TypeError``) naming what is missing."""
    for method in REQUIRED_METHODS:
        if not callable(getattr(store, method, None)):
            raise StoreCapabilityError(f"{what} lacks MemoryStore.{method}()")
    return capabilities_of(store)


def copy_metadata(metadata: Metadata | None) -> Metadata | None:
    return dict(metadata) if metadata is not None else None


def copy_entry(entry: MemoryEntry) -> MemoryEntry:
    """An entry whose metadata dict the caller may mutate freely."""
    if entry.metadata is None:
        return entry
    return entry.model_copy(update={"metadata": dict(entry.metadata)})
