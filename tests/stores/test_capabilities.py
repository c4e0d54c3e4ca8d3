"""Declared store capabilities: every shipped store declares them, wrappers pass on what their
inner store declares (never more), undeclared third-party stores are inferred from their
methods, and a store that claims what it lacks is refused.

Each backend's declaration is checked against its behaviour, on real servers, by the
conformance suite's ``test_the_declared_capabilities_are_what_the_store_does``
(``oma.testing``, run by ``test_conformance.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from oma.errors import StoreCapabilityError, StoreError
from oma.memory.shared import SharedMemory
from oma.store import (
    ExpiringRedactingStore,
    FileStore,
    InMemoryStore,
    PostgresStore,
    PrefixedStore,
    RedactingStore,
    RedisStore,
    StoreCapabilities,
    capabilities_of,
    check_store,
    supports_compare_and_set,
    supports_expiry,
    supports_journal,
)
from oma.store.base import MemoryEntry, Metadata
from oma.store.faults import FaultInjectingStore
from tests.plain_store import PlainStore

ALL = StoreCapabilities(compare_and_set=True, expiry=True, journal=True, value_size=True)


# PlainStore (tests.plain_store): a third-party store written before capabilities existed.


class UndeclaredCasStore(PlainStore):
    """Undeclared, with a compare_and_set method: inferred to have it, as before."""

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        return await self.inner.compare_and_set(key, expected, value, metadata)


class NonAtomicCasStore(UndeclaredCasStore):
    """Has the method but cannot make it atomic over its writers: declares it off."""

    capabilities = StoreCapabilities(expiry=False, compare_and_set=False)


class ClaimsWhatItLacks(PlainStore):
    capabilities = StoreCapabilities(compare_and_set=True)


class ClaimsHalfAJournal(PlainStore):
    capabilities = StoreCapabilities(journal=True)

    async def journal_write(self, key: str, records: Sequence[str], **options: Any) -> bool:
        return False


class UndeclaredHalfJournal(PlainStore):
    async def journal_write(self, key: str, records: Sequence[str], **options: Any) -> bool:
        return False


class WrongDeclaration(PlainStore):
    capabilities = ("compare_and_set",)


def test_every_shipped_store_declares_its_capabilities_on_the_class() -> None:
    assert InMemoryStore.capabilities == ALL
    assert RedisStore.capabilities == ALL
    assert PostgresStore.capabilities == ALL
    assert FileStore.capabilities == StoreCapabilities(compare_and_set=True, expiry=True)
    for store_class in (InMemoryStore, RedisStore, PostgresStore, FileStore):
        assert isinstance(store_class.__dict__["capabilities"], StoreCapabilities)
    # Wrappers declare on the class too: a property that reads the inner store's declaration.
    for wrapper in (PrefixedStore, RedactingStore, FaultInjectingStore):
        assert isinstance(wrapper.__dict__["capabilities"], property)


def test_capabilities_are_frozen_booleans() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ALL.journal = False  # type: ignore[misc]
    with pytest.raises(TypeError, match="must be True or False"):
        StoreCapabilities(compare_and_set=1)  # type: ignore[arg-type]
    assert StoreCapabilities() == StoreCapabilities(
        compare_and_set=False, expiry=False, journal=False
    )
    assert ALL.declared() == ("compare_and_set", "expiry", "journal", "value_size")


def test_undeclared_third_party_stores_are_inferred_from_their_methods() -> None:
    plain, cas = PlainStore(), UndeclaredCasStore()
    assert capabilities_of(plain) == StoreCapabilities()
    assert not supports_compare_and_set(plain) and not supports_expiry(plain)
    assert not supports_journal(plain)
    assert capabilities_of(cas) == StoreCapabilities(compare_and_set=True)
    assert supports_compare_and_set(cas)


def test_a_declaration_wins_over_a_method_the_store_has() -> None:
    store = NonAtomicCasStore()
    assert callable(store.compare_and_set)
    assert not supports_compare_and_set(store)
    # ... and a wrapper over it neither claims nor offers the method.
    part = PrefixedStore(store, "p/")
    assert not supports_compare_and_set(part) and not hasattr(part, "compare_and_set")


def test_a_store_claiming_a_capability_without_its_method_is_refused() -> None:
    with pytest.raises(StoreCapabilityError) as caught:
        supports_compare_and_set(ClaimsWhatItLacks())
    message = str(caught.value)
    assert "ClaimsWhatItLacks declares the 'compare_and_set' capability" in message
    assert "no callable compare_and_set()" in message and "compare_and_set=False" in message
    error = caught.value
    assert isinstance(error, TypeError) and isinstance(error, StoreError)
    assert error.code == "STORE_CAPABILITY" and error.transient is False
    # Any check refuses it, not only the one of the missing capability.
    with pytest.raises(StoreCapabilityError):
        supports_expiry(ClaimsWhatItLacks())
    with pytest.raises(StoreCapabilityError, match="no callable journal_get"):
        supports_journal(ClaimsHalfAJournal())


def test_an_undeclared_store_with_half_a_journal_is_refused() -> None:
    with pytest.raises(StoreCapabilityError) as caught:
        supports_journal(UndeclaredHalfJournal())
    message = str(caught.value)
    assert "has journal_write(), so it is taken to have the 'journal' capability" in message
    assert "no callable journal_get()" in message


def test_a_declaration_that_is_not_store_capabilities_is_refused() -> None:
    with pytest.raises(StoreCapabilityError, match="not a StoreCapabilities"):
        capabilities_of(WrongDeclaration())


def test_shared_memory_refuses_an_unusable_store_up_front() -> None:
    with pytest.raises(StoreCapabilityError, match="declares the 'compare_and_set'"):
        SharedMemory(ClaimsWhatItLacks())

    class NoClear:
        async def get(self, key: str) -> None:
            return None

        async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
            pass

        async def list(self) -> list[MemoryEntry]:
            return []

        async def delete(self, key: str) -> None:
            pass

    with pytest.raises(TypeError, match=r"shared memory store lacks MemoryStore\.clear\(\)"):
        SharedMemory(NoClear())  # type: ignore[arg-type]
    assert check_store(PlainStore()) == StoreCapabilities()


def test_prefixed_store_declares_exactly_what_its_inner_store_declares(tmp_path: Path) -> None:
    assert capabilities_of(PrefixedStore(InMemoryStore(), "p/")) == ALL
    over_file = PrefixedStore(FileStore(tmp_path / "s.json"), "p/")
    assert capabilities_of(over_file) == StoreCapabilities(compare_and_set=True, expiry=True)
    assert not hasattr(over_file, "journal_write")
    over_plain = PrefixedStore(PlainStore(), "p/")
    assert capabilities_of(over_plain) == StoreCapabilities()
    assert not hasattr(over_plain, "compare_and_set") and not hasattr(over_plain, "journal_get")


def test_redacting_store_declares_the_inner_expiry_and_nothing_else() -> None:
    over_memory = RedactingStore(InMemoryStore())
    assert capabilities_of(over_memory) == StoreCapabilities(expiry=True)
    over_plain = RedactingStore(PlainStore())
    assert capabilities_of(over_plain) == StoreCapabilities()
    # Its inner store swapped for one without expiry: the method stays, the claim does not.
    assert isinstance(over_memory, ExpiringRedactingStore)
    over_memory.inner = PlainStore()
    assert not supports_expiry(over_memory)
    # And the other way round: a plain one never claims expiry it has no method for.
    over_plain.inner = InMemoryStore()
    assert capabilities_of(over_plain) == StoreCapabilities()


def test_fault_injecting_store_declares_what_its_inner_store_declares(tmp_path: Path) -> None:
    assert capabilities_of(FaultInjectingStore(InMemoryStore(), None, None)) == ALL
    over_file = FaultInjectingStore(FileStore(tmp_path / "s.json"), None, None)
    assert capabilities_of(over_file) == StoreCapabilities(compare_and_set=True, expiry=True)
    assert not supports_journal(over_file)
    over_plain = FaultInjectingStore(PlainStore(), None, None)
    assert capabilities_of(over_plain) == StoreCapabilities()
    over_non_atomic = FaultInjectingStore(NonAtomicCasStore(), None, None)
    assert not supports_compare_and_set(over_non_atomic)


def test_wrappers_refuse_an_inner_store_that_claims_what_it_lacks() -> None:
    for wrapper in (
        PrefixedStore(ClaimsWhatItLacks(), "p/"),
        RedactingStore(PlainStore()),
        FaultInjectingStore(ClaimsWhatItLacks(), None, None),
    ):
        if isinstance(wrapper, RedactingStore):
            wrapper.inner = ClaimsWhatItLacks()
        with pytest.raises(StoreCapabilityError, match="ClaimsWhatItLacks declares"):
            capabilities_of(wrapper)


async def test_a_wrapper_in_a_wrapper_keeps_the_narrowest_declaration() -> None:
    store = PrefixedStore(RedactingStore(InMemoryStore()), "p/")
    assert capabilities_of(store) == StoreCapabilities(expiry=True)
    await store.set_with_expiry("k", "v", 2)
    entry = await store.get("k")
    assert entry is not None and entry.expires_at_turn == 2


def test_a_store_is_checked_again_when_its_declaration_changes() -> None:
    part = PrefixedStore(InMemoryStore(), "p/")
    assert capabilities_of(part) == ALL  # checked, and remembered
    part.inner = ClaimsWhatItLacks()
    with pytest.raises(StoreCapabilityError, match="ClaimsWhatItLacks declares"):
        supports_compare_and_set(part)
    part.inner = PlainStore()
    assert capabilities_of(part) == StoreCapabilities()


@dataclasses.dataclass
class UnhashableStore(PlainStore):
    """A dataclass compares by value, so it has no hash: checked every time, still works."""

    name: str = "x"

    def __post_init__(self) -> None:
        PlainStore.__init__(self)

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        await self.inner.set_with_expiry(key, value, expires_at_turn, metadata)


def test_an_unhashable_store_is_checked_at_every_call() -> None:
    store = UnhashableStore()
    assert store.__hash__ is None
    assert supports_expiry(store) and supports_expiry(store)
    assert not supports_compare_and_set(store)
