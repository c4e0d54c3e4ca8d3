"""The store contract, run against every backend in ``conftest.BACKENDS``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from oma.store import (
    APPROVAL_KEY_PREFIX,
    CHECKPOINT_KEY_PREFIX,
    CompareAndSetStore,
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
from tests.engine.helpers import wait_until
from tests.stores.conftest import DECLARED

RESOLUTION = timedelta(milliseconds=1)  # the coarsest created_at a backend keeps (FileStore)


async def clock_past(stamp: datetime) -> None:
    """Wait until a timestamp taken now is later than ``stamp`` in every backend: the clock has
    passed the millisecond ``stamp`` fell in. (Every backend's clock is this machine's.)"""
    await wait_until(lambda: datetime.now(UTC) >= stamp + RESOLUTION, f"the clock to pass {stamp}")


async def test_missing_key_reads_none(store: MemoryStore) -> None:
    assert await store.get("absent") is None
    assert await store.list() == []


async def test_set_then_get_round_trips_value_and_metadata(store: MemoryStore) -> None:
    await store.set("k", "v ünïcødé 🚀 \u2028", {"agent": "alice", "n": 1})
    entry = await store.get("k")
    assert entry is not None
    assert (entry.key, entry.value, entry.metadata) == (
        "k",
        "v ünïcødé 🚀 \u2028",
        {"agent": "alice", "n": 1},
    )
    assert entry.expires_at_turn is None


async def test_empty_and_large_values(store: MemoryStore) -> None:
    big = "x" * 1_000_000
    await store.set("empty", "")
    await store.set("big", big)
    empty, large = await store.get("empty"), await store.get("big")
    assert empty is not None and empty.value == ""
    assert large is not None and large.value == big


async def test_metadata_is_copied_in_and_out(store: MemoryStore) -> None:
    metadata = {"agent": "alice"}
    await store.set("k", "v", metadata)
    metadata["agent"] = "mallory"
    entry = await store.get("k")
    assert entry is not None and entry.metadata == {"agent": "alice"}
    assert entry.metadata is not None
    entry.metadata["agent"] = "eve"
    again = await store.get("k")
    assert again is not None and again.metadata == {"agent": "alice"}


async def test_update_keeps_created_at_and_position(store: MemoryStore) -> None:
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


async def test_list_is_in_insertion_order(store: MemoryStore) -> None:
    keys = ["zeta", "alpha", "mid", "0", "Äpfel"]
    for key in keys:
        await store.set(key, key.upper())
    listed = await store.list()
    assert [entry.key for entry in listed] == keys
    assert [entry.value for entry in listed] == [key.upper() for key in keys]


async def test_delete_and_clear(store: MemoryStore) -> None:
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


async def test_reserved_keys_are_ordinary_keys_to_a_store(store: MemoryStore) -> None:
    checkpoint = f"{CHECKPOINT_KEY_PREFIX}run-1/latest"
    approval = f"{APPROVAL_KEY_PREFIX}apr_{'0' * 32}"
    await store.set("agent/note", "n")
    await store.set(checkpoint, '{"version":4}', {"namespace": "checkpoint"})
    await store.set(approval, '{"version":1}')
    assert [entry.key for entry in await store.list()] == ["agent/note", checkpoint, approval]
    entry = await store.get(checkpoint)
    assert entry is not None and entry.metadata == {"namespace": "checkpoint"}


async def test_set_with_expiry_records_turn_and_plain_set_clears_it(
    store: MemoryStore,
) -> None:
    assert supports_expiry(store)
    await store.set_with_expiry("k", "v", 7, {"agent": "a"})
    entry = await store.get("k")
    assert entry is not None and entry.expires_at_turn == 7 and entry.metadata == {"agent": "a"}
    await store.set("k", "w")
    entry = await store.get("k")
    assert entry is not None and entry.expires_at_turn is None


async def test_cas_creates_absent_key_only_once(cas_store: CompareAndSetStore) -> None:
    assert await cas_store.compare_and_set("k", None, "first", {"m": 1}) is True
    assert await cas_store.compare_and_set("k", None, "second") is False
    entry = await cas_store.get("k")
    assert entry is not None and entry.value == "first" and entry.metadata == {"m": 1}


async def test_cas_mismatch_returns_false_and_changes_nothing(
    cas_store: CompareAndSetStore,
) -> None:
    await cas_store.set("k", "current")
    assert await cas_store.compare_and_set("k", "stale", "new") is False
    assert await cas_store.compare_and_set("absent", "anything", "new") is False
    entry = await cas_store.get("k")
    assert entry is not None and entry.value == "current"
    assert await cas_store.get("absent") is None


async def test_cas_match_swaps_and_keeps_created_at(cas_store: CompareAndSetStore) -> None:
    await cas_store.set("k", "v1")
    before = await cas_store.get("k")
    assert await cas_store.compare_and_set("k", "v1", "v2", {"decision": "approved"}) is True
    after = await cas_store.get("k")
    assert before is not None and after is not None
    assert after.value == "v2" and after.metadata == {"decision": "approved"}
    assert after.created_at == before.created_at


async def test_cas_compares_exact_strings(cas_store: CompareAndSetStore) -> None:
    await cas_store.set("k", '{"a":1}')
    assert await cas_store.compare_and_set("k", '{"a": 1}', "x") is False
    assert await cas_store.compare_and_set("k", '{"a":1}', "x") is True


async def test_concurrent_cas_on_absent_key_has_exactly_one_winner(
    cas_store: CompareAndSetStore,
) -> None:
    results = await asyncio.gather(
        *(cas_store.compare_and_set("race", None, f"writer-{i}") for i in range(50))
    )
    assert results.count(True) == 1
    entry = await cas_store.get("race")
    assert entry is not None and entry.value == f"writer-{results.index(True)}"


async def test_concurrent_cas_increments_lose_no_update(cas_store: CompareAndSetStore) -> None:
    await cas_store.set("counter", "0")

    async def increment() -> None:
        while True:
            entry = await cas_store.get("counter")
            assert entry is not None
            if await cas_store.compare_and_set("counter", entry.value, str(int(entry.value) + 1)):
                return

    await asyncio.gather(*(increment() for _ in range(40)))
    entry = await cas_store.get("counter")
    assert entry is not None and entry.value == "40"


async def test_concurrent_sets_all_land(store: MemoryStore) -> None:
    await asyncio.gather(*(store.set(f"k{i}", str(i)) for i in range(60)))
    listed = await store.list()
    assert sorted(entry.key for entry in listed) == sorted(f"k{i}" for i in range(60))
    assert {entry.key: entry.value for entry in listed}["k42"] == "42"


async def test_values_keep_control_characters_and_nul(store: MemoryStore) -> None:
    value = "line\nnext\ttab\x00nul\r\x1b[0m \\ \" ' end"
    await store.set("k", value, {"nested": {"list": [1, "ü", None, True]}})
    entry = await store.get("k")
    assert entry is not None and entry.value == value
    assert entry.metadata == {"nested": {"list": [1, "ü", None, True]}}


async def test_delete_then_set_moves_key_to_the_end(store: MemoryStore) -> None:
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


async def test_set_with_expiry_update_keeps_created_at_and_position(store: MemoryStore) -> None:
    assert supports_expiry(store)
    await store.set_with_expiry("a", "1", 3)
    await store.set("b", "2")
    first = await store.get("a")
    await store.set_with_expiry("a", "3", 9, {"m": 1})
    entry = await store.get("a")
    assert first is not None and entry is not None
    assert (entry.value, entry.expires_at_turn, entry.metadata) == ("3", 9, {"m": 1})
    assert entry.created_at == first.created_at
    assert [e.key for e in await store.list()] == ["a", "b"]


async def test_created_at_is_an_aware_recent_time(store: MemoryStore) -> None:
    before = datetime.now(UTC)
    await store.set("k", "v")
    entry = await store.get("k")
    assert entry is not None and entry.created_at.tzinfo is not None
    # Server clocks (Redis TIME, Postgres clock_timestamp) are this machine's clock here.
    assert abs((entry.created_at - before).total_seconds()) < 5


async def test_cas_clears_expiry_and_keeps_position(cas_store: CompareAndSetStore) -> None:
    expiring: MemoryStore = cas_store
    assert supports_expiry(expiring)
    await expiring.set_with_expiry("a", "1", 4)
    await cas_store.set("b", "2")
    assert await cas_store.compare_and_set("a", "1", "swapped") is True
    entry = await cas_store.get("a")
    assert entry is not None and entry.value == "swapped" and entry.expires_at_turn is None
    assert [e.key for e in await cas_store.list()] == ["a", "b"]


async def test_cas_after_delete_sees_the_key_absent(cas_store: CompareAndSetStore) -> None:
    await cas_store.set("k", "v")
    await cas_store.delete("k")
    assert await cas_store.compare_and_set("k", "v", "w") is False
    assert await cas_store.compare_and_set("k", None, "fresh") is True
    await cas_store.clear()
    assert await cas_store.compare_and_set("k", None, "after-clear") is True


async def test_cas_with_large_expected_value(cas_store: CompareAndSetStore) -> None:
    big = "y" * 500_000
    await cas_store.set("k", big)
    assert await cas_store.compare_and_set("k", big + "!", "no") is False
    assert await cas_store.compare_and_set("k", big, "yes") is True


async def test_the_declared_capabilities_are_what_the_store_does(
    store: MemoryStore, backend: str
) -> None:
    """Each backend declares what it is known to offer; it has exactly the methods of what it
    declares, the ``supports_*`` guards answer from the declaration, and each declared
    capability works."""
    declared = capabilities_of(store)
    assert declared == DECLARED[backend]
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
