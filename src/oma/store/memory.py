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
        # Every record kept (``start`` numbers the first), and each journal's base number.
        self._journals: dict[str, JournalEntry] = {}
        self._bases: dict[str, int] = {}

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
        self._bases.pop(key, None)

    async def clear(self) -> None:
        self._entries.clear()
        self._journals.clear()
        self._bases.clear()

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        journal = self._journals.get(key)
        if journal is None:
            return None
        first = journal.start if history else self._bases.get(key, journal.start)
        return journal.model_copy(
            update={
                "records": journal.records[first - journal.start :],
                "metadata": copy_metadata(journal.metadata),
                "start": first,
            }
        )

    async def journal_version(self, key: str) -> str | None:
        journal = self._journals.get(key)
        return journal.version if journal is not None else None

    async def journal_head(self, key: str) -> JournalHead | None:
        journal = self._journals.get(key)
        if journal is None:
            return None
        base = self._bases.get(key, journal.start)
        return JournalHead(
            key=key,
            records=journal.start + len(journal.records) - base,
            version=journal.version,
            metadata=copy_metadata(journal.metadata),
            created_at=journal.created_at,
            base=base,
            start=journal.start,
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
        rebase: bool = False,
        drop_before: int | None = None,
    ) -> bool:
        check_write(records, replace=replace, force=force, rebase=rebase, drop_before=drop_before)
        current = self._journals.get(key)
        if not force and (current.version if current is not None else None) != expected:
            return False
        if not replace and current is None:
            return False
        kept: list[str] = [] if replace or current is None else current.records
        start = 0 if replace or current is None else current.start
        end = start + len(kept)
        if replace:
            self._bases[key] = 0
        elif rebase:
            self._bases[key] = end
            if drop_before is not None and drop_before > start:
                cut = min(drop_before, end)
                kept, start = kept[cut - start :], cut
        self._journals[key] = JournalEntry(
            key=key,
            records=[*kept, *records],
            version=version,
            metadata=copy_metadata(metadata),
            created_at=current.created_at if current is not None else datetime.now(UTC),
            start=start,
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
