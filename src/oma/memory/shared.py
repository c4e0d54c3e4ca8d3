"""Shared memory: agent-namespaced entries (``<agent>/<key>``) over any ``MemoryStore``.

Reserved keys (checkpoints, approval rows) are invisible here: reads return nothing, listings
and snapshots skip them, restore neither deletes nor writes them. Entries may expire after a
number of turns; the turn counter advances once per completed task.
"""

from __future__ import annotations

from oma.checkpoint.snapshot import SharedMemoryEntrySnapshot, SharedMemorySnapshot
from oma.store.base import (
    Entries,
    MemoryEntry,
    MemoryStore,
    Metadata,
    check_store,
    supports_expiry,
)
from oma.store.reserved import is_reserved_key
from oma.timeutil import format_iso


class SharedMemory:
    """A team's shared memory in a ``MemoryStore``: keys ``<agent>/<key>``, reserved keys hidden,
    entries that may expire after a number of turns."""

    def __init__(self, store: MemoryStore) -> None:
        check_store(store, "shared memory store")  # a TypeError naming what it lacks
        self.store = store
        self.turn_count = 0

    async def write(
        self,
        agent: str,
        key: str,
        value: str,
        metadata: Metadata | None = None,
        ttl_turns: int | None = None,
    ) -> None:
        full_key = f"{agent}/{key}"
        entry_metadata = {**(metadata or {}), "agent": agent}
        if ttl_turns is not None and supports_expiry(self.store):
            await self.store.set_with_expiry(
                full_key, value, self.turn_count + ttl_turns, entry_metadata
            )
        else:
            await self.store.set(full_key, value, entry_metadata)

    async def read(self, key: str) -> MemoryEntry | None:
        if is_reserved_key(key):
            return None
        entry = await self.store.get(key)
        return entry if entry is not None and self._live(entry) else None

    async def list(self) -> Entries:  # not list[...]: in here `list` is this method
        return [e for e in await self.store.list() if not is_reserved_key(e.key) and self._live(e)]

    def advance_turn(self) -> None:
        self.turn_count += 1

    async def summary(self) -> str:
        entries = await self.list()
        return "\n".join(f"- {entry.key}: {entry.value}" for entry in entries)

    async def snapshot(self) -> SharedMemorySnapshot:
        return SharedMemorySnapshot(
            version=1,
            turn_count=self.turn_count,
            entries=[
                SharedMemoryEntrySnapshot(
                    key=entry.key,
                    value=entry.value,
                    metadata=entry.metadata,
                    created_at=format_iso(entry.created_at),
                    expires_at_turn=entry.expires_at_turn,
                )
                for entry in await self.list()
            ],
        )

    async def restore(self, snapshot: SharedMemorySnapshot) -> None:
        for entry in await self.store.list():
            if not is_reserved_key(entry.key):
                await self.store.delete(entry.key)
        for item in snapshot.entries:
            if is_reserved_key(item.key):
                continue
            if item.expires_at_turn is not None and supports_expiry(self.store):
                await self.store.set_with_expiry(
                    item.key, item.value, item.expires_at_turn, item.metadata
                )
            else:
                await self.store.set(item.key, item.value, item.metadata)
        self.turn_count = snapshot.turn_count

    def _live(self, entry: MemoryEntry) -> bool:
        return entry.expires_at_turn is None or entry.expires_at_turn > self.turn_count
