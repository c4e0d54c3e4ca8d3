"""A part of a store: every key under one prefix, seen without it.

Tenants sharing a store (TeamRuns of different Kubernetes namespaces) each see only their
part, so equal run ids never meet; a run's shared memory sees only its own scope, so restoring
one run's memory cannot delete another's. Both prefixes start with a reserved key prefix
(``oma.store.reserved``): shared memory of a run that uses the whole store never reads, lists
or deletes them.

Compare-and-set, expiry and journals exist on the part exactly when the store declares them
(``capabilities`` is the inner store's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from oma.store.base import (
    Entries,
    MemoryEntry,
    MemoryStore,
    Metadata,
    close_store,
    supports_compare_and_set,
    supports_expiry,
    supports_value_size,
)
from oma.store.capabilities import StoreCapabilities, capabilities_of
from oma.store.journal import JournalEntry, JournalHead, supports_journal
from oma.store.reserved import MEMORY_KEY_PREFIX, TENANT_KEY_PREFIX

SCOPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class PrefixedStore:
    """One part of ``inner``: the keys under ``prefix`` (ending in ``/``), seen without it."""

    def __init__(self, inner: MemoryStore, prefix: str) -> None:
        if not prefix.endswith("/") or prefix == "/":
            raise ValueError(f"a store prefix ends with '/' and names something: {prefix!r}")
        self.inner = inner
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"PrefixedStore({self.inner!r}, {self.prefix!r})"

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's: a part passes every capability on, with its keys prefixed."""
        return capabilities_of(self.inner)

    def _own(self, entry: MemoryEntry) -> MemoryEntry:
        return entry.model_copy(update={"key": entry.key[len(self.prefix) :]})

    async def get(self, key: str) -> MemoryEntry | None:
        entry = await self.inner.get(self.prefix + key)
        return self._own(entry) if entry is not None else None

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self.inner.set(self.prefix + key, value, metadata)

    async def list(self) -> Entries:
        return [self._own(e) for e in await self.inner.list() if e.key.startswith(self.prefix)]

    async def delete(self, key: str) -> None:
        await self.inner.delete(self.prefix + key)

    async def clear(self) -> None:
        for entry in await self.inner.list():
            if entry.key.startswith(self.prefix):
                await self.inner.delete(entry.key)
        if supports_journal(self.inner):
            for key in await self.inner.journal_keys():
                if key.startswith(self.prefix):
                    await self.inner.delete(key)

    async def aclose(self) -> None:
        await close_store(self.inner)

    def __getattr__(self, name: str) -> Any:
        # Optional capabilities, with the key prefixed, only where the inner store declares them.
        if name == "compare_and_set" and supports_compare_and_set(self.inner):
            inner_cas = self.inner.compare_and_set

            async def compare_and_set(
                key: str, expected: str | None, value: str, metadata: Metadata | None = None
            ) -> bool:
                return await inner_cas(self.prefix + key, expected, value, metadata)

            return compare_and_set
        if name == "set_with_expiry" and supports_expiry(self.inner):
            inner_expiry = self.inner.set_with_expiry

            async def set_with_expiry(
                key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
            ) -> None:
                await inner_expiry(self.prefix + key, value, expires_at_turn, metadata)

            return set_with_expiry
        if name == "value_size" and supports_value_size(self.inner):
            inner_size = self.inner.value_size

            async def value_size(key: str) -> int | None:
                return await inner_size(self.prefix + key)

            return value_size
        if name.startswith("journal_") and supports_journal(self.inner):
            return getattr(_PrefixedJournal(self.inner, self.prefix), name)
        raise AttributeError(name)


class _PrefixedJournal:
    """The journal methods of a ``PrefixedStore`` over a store that has them."""

    def __init__(self, inner: Any, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        entry: JournalEntry | None = await self.inner.journal_get(
            self.prefix + key, history=history
        )
        return entry.model_copy(update={"key": key}) if entry is not None else None

    async def journal_version(self, key: str) -> str | None:
        version: str | None = await self.inner.journal_version(self.prefix + key)
        return version

    async def journal_head(self, key: str) -> JournalHead | None:
        head: JournalHead | None = await self.inner.journal_head(self.prefix + key)
        return head.model_copy(update={"key": key}) if head is not None else None

    async def journal_write(self, key: str, records: Sequence[str], **options: Any) -> bool:
        written: bool = await self.inner.journal_write(self.prefix + key, records, **options)
        return written

    async def journal_keys(self) -> list[str]:
        keys: list[str] = await self.inner.journal_keys()
        return [key[len(self.prefix) :] for key in keys if key.startswith(self.prefix)]


def tenant_prefix(tenant: str) -> str:
    """The part of a store that belongs to one tenant (a Kubernetes namespace)."""
    return f"{TENANT_KEY_PREFIX}{tenant}/"


def memory_prefix(run_id: str, scope: str | None = None) -> str:
    """The part a run's shared memory lives in: its own, or a scope shared by name."""
    if scope:
        return f"{MEMORY_KEY_PREFIX}scope/{scope}/"
    return f"{MEMORY_KEY_PREFIX}run/{quote(run_id, safe='')}/"  # a '/' in a run id stays in it
