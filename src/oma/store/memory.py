"""``InMemoryStore``: a dict in one process. Dies with the process; CAS is process-local atomic."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from oma.store.base import Entries, MemoryEntry, Metadata, copy_entry, copy_metadata
from oma.store.capabilities import StoreCapabilities
from oma.store.journal import JournalEntry, JournalHead, JournalKeys, check_write


class InMemoryStore:
    """Map-backed store. ``compare_and_set`` is atomic because nothing in it awaits."""

    capabilities = StoreCapabilities(
        compare_and_set=True, expiry=True, journal=True, value_size=True
    )

    def __init__(self) -> None:
        self._entries: dict[str, MemoryEntry] = {}
        self._journals: dict[str, JournalEntry] = {}

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

    async def value_size(self, key: str) -> int | None:
        entry = self._entries.get(key)
        return len(entry.value.encode("utf-8", "surrogatepass")) if entry is not None else None

    async def delete(self, key: str) -> None:
        self._entries.pop(key, None)
        self._journals.pop(key, None)

    async def clear(self) -> None:
        self._entries.clear()
        self._journals.clear()

    async def journal_get(self, key: str) -> JournalEntry | None:
        journal = self._journals.get(key)
        if journal is None:
            return None
        return journal.model_copy(
            update={"records": list(journal.records), "metadata": copy_metadata(journal.metadata)}
        )

    async def journal_version(self, key: str) -> str | None:
        journal = self._journals.get(key)
        return journal.version if journal is not None else None

    async def journal_head(self, key: str) -> JournalHead | None:
        journal = self._journals.get(key)
        if journal is None:
            return None
        return JournalHead(
            key=key,
            records=len(journal.records),
            version=journal.version,
            metadata=copy_metadata(journal.metadata),
            created_at=journal.created_at,
        )

    async def journal_write(
        self,
        key: str,
        records: Sequence[str],
        *,
        version: str,
        expected: str | None,
        replace: bool,
        force: bool = False,
        metadata: Metadata | None = None,
    ) -> bool:
        check_write(records, replace=replace, force=force)
        current = self._journals.get(key)
        if not force and (current.version if current is not None else None) != expected:
            return False
        if not replace and current is None:
            return False
        kept = [] if replace or current is None else current.records
        self._journals[key] = JournalEntry(
            key=key,
            records=[*kept, *records],
            version=version,
            metadata=copy_metadata(metadata),
            created_at=current.created_at if current is not None else datetime.now(UTC),
        )
        return True

    async def journal_keys(self) -> JournalKeys:
        return list(self._journals)

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
