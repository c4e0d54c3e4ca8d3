"""A store that is not ours passes the published conformance suite by importing it.

``DictStore`` is what a third party might write: entries in a dict, shared by every store made
over one ``DictState`` (as a second process would share a database), with an atomic
``compare_and_set`` (nothing in it awaits) and expiry, no journals and no ``value_size``. It
imports only the public ``oma.store`` API; the test below is all a third party writes to run
the whole suite (``oma.testing``). ``test_published_suite.py`` reuses this file, unchanged,
as the base of deliberately broken stores.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime

from oma.store import MemoryEntry, Metadata, StoreCapabilities
from oma.testing import StoreConformance


@dataclass
class DictState:
    entries: dict[str, MemoryEntry] = field(default_factory=dict)


class DictStore:
    capabilities = StoreCapabilities(compare_and_set=True, expiry=True)

    def __init__(self, state: DictState) -> None:
        self.state = state

    async def get(self, key: str) -> MemoryEntry | None:
        entry = self.state.entries.get(key)
        return entry.model_copy(deep=True) if entry is not None else None

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        self._put(key, value, metadata, None)

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        self._put(key, value, metadata, expires_at_turn)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        current = self.state.entries.get(key)
        if (current.value if current is not None else None) != expected:
            return False
        self._put(key, value, metadata, None)
        return True

    async def list(self) -> list[MemoryEntry]:
        return [entry.model_copy(deep=True) for entry in self.state.entries.values()]

    async def delete(self, key: str) -> None:
        self.state.entries.pop(key, None)

    async def clear(self) -> None:
        self.state.entries.clear()

    def _put(self, key: str, value: str, metadata: Metadata | None, expires: int | None) -> None:
        old = self.state.entries.get(key)  # a dict keeps an updated key where it was
        self.state.entries[key] = MemoryEntry(
            key=key,
            value=value,
            metadata=copy.deepcopy(metadata),
            created_at=old.created_at if old is not None else datetime.now(UTC),
            expires_at_turn=expires,
        )


class TestDictStore(StoreConformance):
    expected_capabilities = StoreCapabilities(compare_and_set=True, expiry=True)

    def setup_method(self) -> None:
        self.state = DictState()  # one per test: pytest makes a new instance for each

    async def make_store(self) -> DictStore:
        return DictStore(self.state)
