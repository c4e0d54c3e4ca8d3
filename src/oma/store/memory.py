"""``InMemoryStore``: a dict in one process. Dies with the process; CAS is process-local atomic."""

from __future__ import annotations

from datetime import UTC, datetime

from oma.store.base import Entries, MemoryEntry, Metadata, copy_entry, copy_metadata


class InMemoryStore:
    """Map-backed store. ``compare_and_set`` is atomic because nothing in it awaits."""

    def __init__(self) -> None:
        self._entries: dict[str, MemoryEntry] = {}

    async def get(self, key: str) -> MemoryEntry | None:
        entry = self._entries.get(key)
        return copy_entry(entry) if entry is not None else None

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        self._put(key, value, metadata, None)

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        self._put(key, value, metadata, expires_at_turn)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        current = self._entries.get(key)
        if (current.value if current is not None else None) != expected:
            return False
        self._put(key, value, metadata, None)
        return True

    async def list(self) -> Entries:
        return [copy_entry(entry) for entry in self._entries.values()]

    async def delete(self, key: str) -> None:
        self._entries.pop(key, None)

    async def clear(self) -> None:
        self._entries.clear()

    async def search(self, query: str) -> Entries:
        """Entries whose key or value contains ``query`` (case-insensitive); all when empty."""
        needle = query.lower()
        return [
            copy_entry(entry)
            for entry in self._entries.values()
            if not needle or needle in entry.key.lower() or needle in entry.value.lower()
        ]

    @property
    def size(self) -> int:
        return len(self._entries)

    def has(self, key: str) -> bool:
        return key in self._entries

    def _put(
        self, key: str, value: str, metadata: Metadata | None, expires_at_turn: int | None
    ) -> None:
        existing = self._entries.get(key)
        self._entries[key] = MemoryEntry(
            key=key,
            value=value,
            metadata=copy_metadata(metadata),
            created_at=existing.created_at if existing is not None else datetime.now(UTC),
            expires_at_turn=expires_at_turn,
        )
