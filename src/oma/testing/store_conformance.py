"""The ``MemoryStore`` conformance suite: the contract, ``compare_and_set``, expiry, the declared
capabilities, and (inherited from ``JournalConformance``) journals."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from oma.store import (
    APPROVAL_KEY_PREFIX,
    CHECKPOINT_KEY_PREFIX,
    CompareAndSetStore,
    ExpiringStore,
    MemoryStore,
    capabilities_of,
    check_store,
    supports_compare_and_set,
    supports_expiry,
    supports_journal,
    supports_value_size,
)
from oma.store.capabilities import CAPABILITY_METHODS
from oma.store.journal import new_version
from oma.testing.harness import (
    StoreFactory,
    with_cas_store,
    with_expiring_store,
    with_factory,
    with_store,
)
from oma.testing.journal_conformance import JournalConformance

RESOLUTION = timedelta(milliseconds=1)  # the coarsest created_at a store may keep (FileStore)


async def clock_past(stamp: datetime, limit: float = 10.0) -> None:
    """Wait until a timestamp taken now is later than ``stamp`` in every store: the clock has
    passed the millisecond ``stamp`` fell in. (Every store's clock is this machine's.)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while datetime.now(UTC) < stamp + RESOLUTION:
        if loop.time() > deadline:
            raise AssertionError(
                f"timed out after {limit:g}s waiting for the clock to pass {stamp}"
            )
        await asyncio.sleep(0.001)


class StoreConformance(JournalConformance):
    """The whole conformance suite. Subclass it as ``Test...`` in a ``test_*.py`` file, set
    ``expected_capabilities`` and define ``async def make_store(self)``; pytest collects every
    test. The tests of an optional capability are skipped, with the reason, for a store that
    does not declare it; a store that declares one is tested on it."""

    @with_store
    async def test_missing_key_reads_none(self, store: MemoryStore) -> None:
        assert await store.get("absent") is None
        assert await store.list() == []

    @with_store
    async def test_set_then_get_round_trips_value_and_metadata(self, store: MemoryStore) -> None:
        await store.set("k", "v ünïcødé 🚀 \u2028", {"agent": "alice", "n": 1})
        entry = await store.get("k")
        assert entry is not None
        assert (entry.key, entry.value, entry.metadata) == (
            "k",
            "v ünïcødé 🚀 \u2028",
            {"agent": "alice", "n": 1},
        )
        assert entry.expires_at_turn is None

    @with_store
    async def test_empty_and_large_values(self, store: MemoryStore) -> None:
        big = "x" * 1_000_000
        await store.set("empty", "")
        await store.set("big", big)
        empty, large = await store.get("empty"), await store.get("big")
        assert empty is not None and empty.value == ""
        assert large is not None and large.value == big

    @with_store
    async def test_metadata_is_copied_in_and_out(self, store: MemoryStore) -> None:
        metadata = {"agent": "alice"}
        await store.set("k", "v", metadata)
        metadata["agent"] = "mallory"
        entry = await store.get("k")
        assert entry is not None and entry.metadata == {"agent": "alice"}
        assert entry.metadata is not None
        entry.metadata["agent"] = "eve"
        again = await store.get("k")
        assert again is not None and again.metadata == {"agent": "alice"}

    @with_store
    async def test_update_keeps_created_at_and_position(self, store: MemoryStore) -> None:
        await store.set("a", "1", {"x": 1})
        await store.set("b", "2")
        first = await store.get("a")
        assert first is not None
        await clock_past(first.created_at)  # a created_at taken anew would differ
        await store.set("a", "3")
        updated = await store.get("a")
        assert first is not None and updated is not None
        assert updated.created_at == first.created_at
        assert updated.value == "3" and updated.metadata is None
        assert [entry.key for entry in await store.list()] == ["a", "b"]

    @with_store
    async def test_list_is_in_insertion_order(self, store: MemoryStore) -> None:
        keys = ["zeta", "alpha", "mid", "0", "Äpfel"]
        for key in keys:
            await store.set(key, key.upper())
        listed = await store.list()
        assert [entry.key for entry in listed] == keys
        assert [entry.value for entry in listed] == [key.upper() for key in keys]

    @with_store
    async def test_delete_and_clear(self, store: MemoryStore) -> None:
        await store.set("a", "1")
        await store.set("b", "2")
        await store.delete("a")
        await store.delete("never-there")
        assert await store.get("a") is None
        assert [entry.key for entry in await store.list()] == ["b"]
        await store.clear()
        assert await store.list() == []
        await store.set("a", "again")
        entry = await store.get("a")
        assert entry is not None and entry.value == "again"

    @with_store
    async def test_reserved_keys_are_ordinary_keys_to_a_store(self, store: MemoryStore) -> None:
        checkpoint = f"{CHECKPOINT_KEY_PREFIX}run-1/latest"
        approval = f"{APPROVAL_KEY_PREFIX}apr_{'0' * 32}"
        await store.set("agent/note", "n")
        await store.set(checkpoint, '{"version":4}', {"namespace": "checkpoint"})
        await store.set(approval, '{"version":1}')
        assert [entry.key for entry in await store.list()] == ["agent/note", checkpoint, approval]
        entry = await store.get(checkpoint)
        assert entry is not None and entry.metadata == {"namespace": "checkpoint"}

    @with_expiring_store
    async def test_set_with_expiry_records_turn_and_plain_set_clears_it(
        self, store: ExpiringStore
    ) -> None:
        await store.set_with_expiry("k", "v", 7, {"agent": "a"})
        entry = await store.get("k")
        assert entry is not None and entry.expires_at_turn == 7 and entry.metadata == {"agent": "a"}
        await store.set("k", "w")
        entry = await store.get("k")
        assert entry is not None and entry.expires_at_turn is None

    @with_cas_store
    async def test_cas_creates_absent_key_only_once(self, store: CompareAndSetStore) -> None:
        assert await store.compare_and_set("k", None, "first", {"m": 1}) is True
        assert await store.compare_and_set("k", None, "second") is False
        entry = await store.get("k")
        assert entry is not None and entry.value == "first" and entry.metadata == {"m": 1}

    @with_cas_store
    async def test_cas_mismatch_returns_false_and_changes_nothing(
        self, store: CompareAndSetStore
    ) -> None:
        await store.set("k", "current")
        assert await store.compare_and_set("k", "stale", "new") is False
        assert await store.compare_and_set("absent", "anything", "new") is False
        entry = await store.get("k")
        assert entry is not None and entry.value == "current"
        assert await store.get("absent") is None

    @with_cas_store
    async def test_cas_match_swaps_and_keeps_created_at(self, store: CompareAndSetStore) -> None:
        await store.set("k", "v1")
        before = await store.get("k")
        assert await store.compare_and_set("k", "v1", "v2", {"decision": "approved"}) is True
        after = await store.get("k")
        assert before is not None and after is not None
        assert after.value == "v2" and after.metadata == {"decision": "approved"}
        assert after.created_at == before.created_at

    @with_cas_store
    async def test_cas_compares_exact_strings(self, store: CompareAndSetStore) -> None:
        await store.set("k", '{"a":1}')
        assert await store.compare_and_set("k", '{"a": 1}', "x") is False
        assert await store.compare_and_set("k", '{"a":1}', "x") is True

    @with_cas_store
    async def test_concurrent_cas_on_absent_key_has_exactly_one_winner(
        self, store: CompareAndSetStore
    ) -> None:
        results = await asyncio.gather(
            *(store.compare_and_set("race", None, f"writer-{i}") for i in range(50))
        )
        assert results.count(True) == 1
        entry = await store.get("race")
        assert entry is not None and entry.value == f"writer-{results.index(True)}"

    @with_cas_store
    async def test_concurrent_cas_increments_lose_no_update(
        self, store: CompareAndSetStore
    ) -> None:
        await store.set("counter", "0")

        async def increment() -> None:
            while True:
                entry = await store.get("counter")
                assert entry is not None
                if await store.compare_and_set("counter", entry.value, str(int(entry.value) + 1)):
                    return

        await asyncio.gather(*(increment() for _ in range(40)))
        entry = await store.get("counter")
        assert entry is not None and entry.value == "40"

    @with_factory
    async def test_concurrent_cas_from_two_stores_has_exactly_one_winner(
        self, make: StoreFactory
    ) -> None:
        """``compare_and_set`` is atomic across every writer (here: two stores over one state,
        as two processes), not only within one store object."""
        first, second = await make(), await make()
        if not (supports_compare_and_set(first) and supports_compare_and_set(second)):
            pytest.skip(f"{type(first).__name__} does not declare compare_and_set")
        results = await asyncio.gather(
            *(
                (first, second)[i % 2].compare_and_set("race", None, f"writer-{i}")
                for i in range(50)
            )
        )
        assert results.count(True) == 1
        for store in (first, second):
            entry = await store.get("race")
            assert entry is not None and entry.value == f"writer-{results.index(True)}"

    @with_factory
    async def test_stores_over_one_state_see_each_others_writes(self, make: StoreFactory) -> None:
        """Two stores made for one test share their state, as two processes would: what one
        writes, deletes or clears, the other reads."""
        first, second = await make(), await make()
        await first.set("a", "1", {"m": 1})
        await first.set("b", "2")
        written = await first.get("a")
        seen = await second.get("a")
        assert written is not None and seen is not None
        assert (seen.value, seen.metadata, seen.created_at) == ("1", {"m": 1}, written.created_at)
        assert [entry.key for entry in await second.list()] == ["a", "b"]
        await second.delete("a")
        await second.set("c", "3")
        assert await first.get("a") is None
        assert [entry.key for entry in await first.list()] == ["b", "c"]
        await first.clear()
        assert await second.list() == []

    @with_store
    async def test_concurrent_sets_all_land(self, store: MemoryStore) -> None:
        await asyncio.gather(*(store.set(f"k{i}", str(i)) for i in range(60)))
        listed = await store.list()
        assert sorted(entry.key for entry in listed) == sorted(f"k{i}" for i in range(60))
        assert {entry.key: entry.value for entry in listed}["k42"] == "42"

    @with_store
    async def test_values_keep_control_characters_and_nul(self, store: MemoryStore) -> None:
        value = "line\nnext\ttab\x00nul\r\x1b[0m \\ \" ' end"
        await store.set("k", value, {"nested": {"list": [1, "ü", None, True]}})
        entry = await store.get("k")
        assert entry is not None and entry.value == value
        assert entry.metadata == {"nested": {"list": [1, "ü", None, True]}}

    @with_store
    async def test_delete_then_set_moves_key_to_the_end(self, store: MemoryStore) -> None:
        for key in ("a", "b", "c"):
            await store.set(key, key)
        first = await store.get("a")
        assert first is not None
        await store.delete("a")
        await clock_past(first.created_at)
        await store.set("a", "again")
        assert [entry.key for entry in await store.list()] == ["b", "c", "a"]
        again = await store.get("a")
        assert first is not None and again is not None and again.created_at > first.created_at

    @with_expiring_store
    async def test_set_with_expiry_update_keeps_created_at_and_position(
        self, store: ExpiringStore
    ) -> None:
        await store.set_with_expiry("a", "1", 3)
        await store.set("b", "2")
        first = await store.get("a")
        await store.set_with_expiry("a", "3", 9, {"m": 1})
        entry = await store.get("a")
        assert first is not None and entry is not None
        assert (entry.value, entry.expires_at_turn, entry.metadata) == ("3", 9, {"m": 1})
        assert entry.created_at == first.created_at
        assert [e.key for e in await store.list()] == ["a", "b"]

    @with_store
    async def test_created_at_is_an_aware_recent_time(self, store: MemoryStore) -> None:
        before = datetime.now(UTC)
        await store.set("k", "v")
        entry = await store.get("k")
        assert entry is not None and entry.created_at.tzinfo is not None
        # A server's clock (Redis TIME, Postgres clock_timestamp) must be close to this one.
        assert abs((entry.created_at - before).total_seconds()) < 5

    @with_cas_store
    async def test_cas_clears_expiry_and_keeps_position(self, store: CompareAndSetStore) -> None:
        expiring: MemoryStore = store
        if not supports_expiry(expiring):
            pytest.skip(f"{type(store).__name__} does not declare expiry")
        await expiring.set_with_expiry("a", "1", 4)
        await store.set("b", "2")
        assert await store.compare_and_set("a", "1", "swapped") is True
        entry = await store.get("a")
        assert entry is not None and entry.value == "swapped" and entry.expires_at_turn is None
        assert [e.key for e in await store.list()] == ["a", "b"]

    @with_cas_store
    async def test_cas_after_delete_sees_the_key_absent(self, store: CompareAndSetStore) -> None:
        await store.set("k", "v")
        await store.delete("k")
        assert await store.compare_and_set("k", "v", "w") is False
        assert await store.compare_and_set("k", None, "fresh") is True
        await store.clear()
        assert await store.compare_and_set("k", None, "after-clear") is True

    @with_cas_store
    async def test_cas_with_large_expected_value(self, store: CompareAndSetStore) -> None:
        big = "y" * 500_000
        await store.set("k", big)
        assert await store.compare_and_set("k", big + "!", "no") is False
        assert await store.compare_and_set("k", big, "yes") is True

    @with_store
    async def test_the_declared_capabilities_are_what_the_store_does(
        self, store: MemoryStore
    ) -> None:
        """The store declares ``expected_capabilities``; it has exactly the methods of what it
        declares, the ``supports_*`` guards answer from the declaration, and each declared
        capability works."""
        declared = capabilities_of(store)
        assert declared == self.expected_capabilities
        assert check_store(store) == declared
        assert supports_compare_and_set(store) is declared.compare_and_set
        assert supports_expiry(store) is declared.expiry
        assert supports_journal(store) is declared.journal
        assert supports_value_size(store) is declared.value_size
        for capability, methods in CAPABILITY_METHODS.items():
            offered = [callable(getattr(store, method, None)) for method in methods]
            assert offered == [getattr(declared, capability)] * len(methods), (capability, offered)

        if supports_compare_and_set(store):
            assert await store.compare_and_set("cas", None, "a") is True
            assert await store.compare_and_set("cas", None, "b") is False
            assert await store.compare_and_set("cas", "a", "b") is True
            swapped = await store.get("cas")
            assert swapped is not None and swapped.value == "b"
        if supports_expiry(store):
            await store.set_with_expiry("ttl", "v", 3)
            expiring = await store.get("ttl")
            assert expiring is not None and expiring.expires_at_turn == 3
        if supports_journal(store):
            version = new_version()
            assert await store.journal_write(
                "j", ["base"], version=version, expected=None, replace=True
            )
            assert await store.journal_write(
                "j", ["delta"], version=new_version(), expected=version, replace=False
            )
            journal = await store.journal_get("j")
            head = await store.journal_head("j")
            assert journal is not None and journal.records == ["base", "delta"]
            assert head is not None and head.records == 2
            assert await store.journal_version("j") == journal.version == head.version
            assert await store.journal_keys() == ["j"]
        if supports_value_size(store):
            assert await store.value_size("sized") is None
            await store.set("sized", "")
            assert await store.value_size("sized") == 0
            await store.set("sized", "é\x00" + "y" * 300_000)  # bytes, not characters
            assert await store.value_size("sized") == 300_003
            await store.delete("sized")
            assert await store.value_size("sized") is None
