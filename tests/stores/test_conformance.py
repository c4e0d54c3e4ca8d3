"""The store contract, run against every backend in ``conftest.BACKENDS``."""

from __future__ import annotations

import asyncio

from oma.store import (
    APPROVAL_KEY_PREFIX,
    CHECKPOINT_KEY_PREFIX,
    CompareAndSetStore,
    supports_compare_and_set,
    supports_expiry,
)


async def test_missing_key_reads_none(store: CompareAndSetStore) -> None:
    assert await store.get("absent") is None
    assert await store.list() == []


async def test_set_then_get_round_trips_value_and_metadata(store: CompareAndSetStore) -> None:
    await store.set("k", "v ünïcødé 🚀 \u2028", {"agent": "alice", "n": 1})
    entry = await store.get("k")
    assert entry is not None
    assert (entry.key, entry.value, entry.metadata) == (
        "k",
        "v ünïcødé 🚀 \u2028",
        {"agent": "alice", "n": 1},
    )
    assert entry.expires_at_turn is None


async def test_empty_and_large_values(store: CompareAndSetStore) -> None:
    big = "x" * 1_000_000
    await store.set("empty", "")
    await store.set("big", big)
    empty, large = await store.get("empty"), await store.get("big")
    assert empty is not None and empty.value == ""
    assert large is not None and large.value == big


async def test_metadata_is_copied_in_and_out(store: CompareAndSetStore) -> None:
    metadata = {"agent": "alice"}
    await store.set("k", "v", metadata)
    metadata["agent"] = "mallory"
    entry = await store.get("k")
    assert entry is not None and entry.metadata == {"agent": "alice"}
    assert entry.metadata is not None
    entry.metadata["agent"] = "eve"
    again = await store.get("k")
    assert again is not None and again.metadata == {"agent": "alice"}


async def test_update_keeps_created_at_and_position(store: CompareAndSetStore) -> None:
    await store.set("a", "1", {"x": 1})
    await store.set("b", "2")
    first = await store.get("a")
    await asyncio.sleep(0.01)
    await store.set("a", "3")
    updated = await store.get("a")
    assert first is not None and updated is not None
    assert updated.created_at == first.created_at
    assert updated.value == "3" and updated.metadata is None
    assert [entry.key for entry in await store.list()] == ["a", "b"]


async def test_list_is_in_insertion_order(store: CompareAndSetStore) -> None:
    keys = ["zeta", "alpha", "mid", "0", "Äpfel"]
    for key in keys:
        await store.set(key, key.upper())
    listed = await store.list()
    assert [entry.key for entry in listed] == keys
    assert [entry.value for entry in listed] == [key.upper() for key in keys]


async def test_delete_and_clear(store: CompareAndSetStore) -> None:
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


async def test_reserved_keys_are_ordinary_keys_to_a_store(store: CompareAndSetStore) -> None:
    checkpoint = f"{CHECKPOINT_KEY_PREFIX}run-1/latest"
    approval = f"{APPROVAL_KEY_PREFIX}apr_{'0' * 32}"
    await store.set("agent/note", "n")
    await store.set(checkpoint, '{"version":4}', {"namespace": "checkpoint"})
    await store.set(approval, '{"version":1}')
    assert [entry.key for entry in await store.list()] == ["agent/note", checkpoint, approval]
    entry = await store.get(checkpoint)
    assert entry is not None and entry.metadata == {"namespace": "checkpoint"}


async def test_set_with_expiry_records_turn_and_plain_set_clears_it(
    store: CompareAndSetStore,
) -> None:
    assert supports_expiry(store)
    await store.set_with_expiry("k", "v", 7, {"agent": "a"})
    entry = await store.get("k")
    assert entry is not None and entry.expires_at_turn == 7 and entry.metadata == {"agent": "a"}
    await store.set("k", "w")
    entry = await store.get("k")
    assert entry is not None and entry.expires_at_turn is None


async def test_cas_creates_absent_key_only_once(store: CompareAndSetStore) -> None:
    assert supports_compare_and_set(store)
    assert await store.compare_and_set("k", None, "first", {"m": 1}) is True
    assert await store.compare_and_set("k", None, "second") is False
    entry = await store.get("k")
    assert entry is not None and entry.value == "first" and entry.metadata == {"m": 1}


async def test_cas_mismatch_returns_false_and_changes_nothing(store: CompareAndSetStore) -> None:
    await store.set("k", "current")
    assert await store.compare_and_set("k", "stale", "new") is False
    assert await store.compare_and_set("absent", "anything", "new") is False
    entry = await store.get("k")
    assert entry is not None and entry.value == "current"
    assert await store.get("absent") is None


async def test_cas_match_swaps_and_keeps_created_at(store: CompareAndSetStore) -> None:
    await store.set("k", "v1")
    before = await store.get("k")
    assert await store.compare_and_set("k", "v1", "v2", {"decision": "approved"}) is True
    after = await store.get("k")
    assert before is not None and after is not None
    assert after.value == "v2" and after.metadata == {"decision": "approved"}
    assert after.created_at == before.created_at


async def test_cas_compares_exact_strings(store: CompareAndSetStore) -> None:
    await store.set("k", '{"a":1}')
    assert await store.compare_and_set("k", '{"a": 1}', "x") is False
    assert await store.compare_and_set("k", '{"a":1}', "x") is True


async def test_concurrent_cas_on_absent_key_has_exactly_one_winner(
    store: CompareAndSetStore,
) -> None:
    results = await asyncio.gather(
        *(store.compare_and_set("race", None, f"writer-{i}") for i in range(50))
    )
    assert results.count(True) == 1
    entry = await store.get("race")
    assert entry is not None and entry.value == f"writer-{results.index(True)}"


async def test_concurrent_cas_increments_lose_no_update(store: CompareAndSetStore) -> None:
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


async def test_concurrent_sets_all_land(store: CompareAndSetStore) -> None:
    await asyncio.gather(*(store.set(f"k{i}", str(i)) for i in range(60)))
    listed = await store.list()
    assert sorted(entry.key for entry in listed) == sorted(f"k{i}" for i in range(60))
    assert {entry.key: entry.value for entry in listed}["k42"] == "42"
