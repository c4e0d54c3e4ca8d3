"""A store with the required ``MemoryStore`` methods only (no compare_and_set, no expiry, no
journal, no capabilities declared): what a third-party store written against the reference's
interface looks like, and a store that cannot hold durable approvals."""

from __future__ import annotations

from oma.store import InMemoryStore
from oma.store.base import MemoryEntry, Metadata


class PlainStore:
    def __init__(self) -> None:
        self.inner = InMemoryStore()

    async def get(self, key: str) -> MemoryEntry | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self.inner.set(key, value, metadata)

    async def list(self) -> list[MemoryEntry]:
        return await self.inner.list()

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def clear(self) -> None:
        await self.inner.clear()
