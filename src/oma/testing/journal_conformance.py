"""The journal capability's part of the conformance suite (``StoreConformance`` includes it)."""

from __future__ import annotations

import asyncio

import pytest

from oma.store import JournalStore, supports_journal
from oma.store.journal import new_version
from oma.testing.harness import (
    ConformanceHarness,
    StoreFactory,
    with_factory,
    with_journal_store,
)


async def _create(store: JournalStore, key: str, base: str = "base") -> str:
    version = new_version()
    assert await store.journal_write(key, [base], version=version, expected=None, replace=True)
    return version


class JournalConformance(ConformanceHarness):
    """The journal contract (``journal_get/head/version/write/keys``). Every test is skipped,
    with the reason, for a store that does not declare ``journal``."""

    @with_journal_store
    async def test_absent_journal_reads_none_and_is_no_entry(self, store: JournalStore) -> None:
        assert await store.journal_get("k") is None
        assert await store.journal_version("k") is None
        await _create(store, "k")
        assert await store.get("k") is None  # journals are not entries
        assert [e.key for e in await store.list()] == []
        assert await store.journal_keys() == ["k"]

    @with_journal_store
    async def test_appends_keep_order_and_replace_drops_them(self, store: JournalStore) -> None:
        first = await _create(store, "k", "b0 ünïcødé \x00 \u2028")
        second = new_version()
        assert await store.journal_write(
            "k", ["r1", "r2"], version=second, expected=first, replace=False, metadata={"n": 1}
        )
        third = new_version()
        assert await store.journal_write("k", ["r3"], version=third, expected=second, replace=False)
        entry = await store.journal_get("k")
        assert entry is not None
        assert (entry.records, entry.version, entry.metadata) == (
            ["b0 ünïcødé \x00 \u2028", "r1", "r2", "r3"],
            third,
            None,
        )
        created = entry.created_at
        fourth = new_version()
        assert await store.journal_write(
            "k", ["b1"], version=fourth, expected=third, replace=True, metadata={"m": True}
        )
        entry = await store.journal_get("k")
        assert entry is not None
        assert (entry.records, entry.version, entry.metadata) == (["b1"], fourth, {"m": True})
        assert entry.created_at == created  # kept, like an entry's

    @with_journal_store
    async def test_a_stale_or_absent_expectation_changes_nothing(self, store: JournalStore) -> None:
        version = await _create(store, "k")
        assert not await store.journal_write(
            "k", ["x"], version=new_version(), expected=None, replace=True
        )
        assert not await store.journal_write(
            "k", ["x"], version=new_version(), expected="stale", replace=False
        )
        assert not await store.journal_write(
            "k", ["x"], version=new_version(), expected="stale", replace=True
        )
        assert not await store.journal_write(  # an append needs a journal to append to
            "other", ["x"], version=new_version(), expected=None, replace=False
        )
        entry = await store.journal_get("k")
        assert entry is not None and (entry.records, entry.version) == (["base"], version)
        assert await store.journal_get("other") is None

    @with_journal_store
    async def test_force_replaces_whatever_is_there(self, store: JournalStore) -> None:
        await _create(store, "k")
        version = new_version()
        assert await store.journal_write(
            "k", ["new"], version=version, expected="anything", replace=True, force=True
        )
        assert await store.journal_write(
            "fresh", ["f"], version=new_version(), expected="x", replace=True, force=True
        )
        entry = await store.journal_get("k")
        assert entry is not None and (entry.records, entry.version) == (["new"], version)
        with pytest.raises(ValueError, match="replacing write only"):
            await store.journal_write(
                "k", ["x"], version=new_version(), expected=None, replace=False, force=True
            )
        with pytest.raises(ValueError, match="at least one record"):
            await store.journal_write(
                "k", [], version=new_version(), expected=version, replace=False
            )

    @with_journal_store
    async def test_delete_and_clear_remove_journals_with_entries(self, store: JournalStore) -> None:
        old = await _create(store, "k")
        await store.set("k", "entry")
        await _create(store, "j")
        await store.delete("k")
        assert await store.get("k") is None
        assert await store.journal_get("k") is None
        # A writer that held the deleted journal's version cannot append to a re-created one.
        await _create(store, "k")
        assert not await store.journal_write(
            "k", ["late"], version=new_version(), expected=old, replace=False
        )
        await store.clear()
        assert await store.journal_keys() == []
        assert await store.journal_get("j") is None

    @with_journal_store
    async def test_racing_appends_from_one_version_have_one_winner(
        self, store: JournalStore
    ) -> None:
        version = await _create(store, "k")
        results = await asyncio.gather(
            *(
                store.journal_write(
                    "k", [f"w{i}"], version=new_version(), expected=version, replace=False
                )
                for i in range(8)
            )
        )
        assert sum(results) == 1
        entry = await store.journal_get("k")
        assert entry is not None and len(entry.records) == 2

    @with_factory
    async def test_racing_appends_from_two_stores_have_one_winner(self, make: StoreFactory) -> None:
        """The journal write is atomic across writers, not only within one store object."""
        first, second = await make(), await make()
        if not (supports_journal(first) and supports_journal(second)):
            pytest.skip(f"{type(first).__name__} does not declare journal")
        version = await _create(first, "k")
        results = await asyncio.gather(
            *(
                (first, second)[i % 2].journal_write(
                    "k", [f"w{i}"], version=new_version(), expected=version, replace=False
                )
                for i in range(8)
            )
        )
        assert sum(results) == 1
        seen = [await store.journal_get("k") for store in (first, second)]
        assert seen[0] is not None and seen[1] is not None
        assert seen[0].records == seen[1].records and len(seen[0].records) == 2

    @with_journal_store
    async def test_many_records_round_trip(self, store: JournalStore) -> None:
        version = await _create(store, "k", "x" * 200_000)
        for n in range(40):
            following = new_version()
            assert await store.journal_write(
                "k", [f"r{n}"], version=following, expected=version, replace=False
            )
            version = following
        entry = await store.journal_get("k")
        assert entry is not None
        assert entry.records == ["x" * 200_000, *(f"r{n}" for n in range(40))]

    @with_journal_store
    async def test_the_head_is_the_journal_without_its_records(self, store: JournalStore) -> None:
        assert await store.journal_head("k") is None
        first = await _create(store, "k", "x" * 10_000)
        second = new_version()
        assert await store.journal_write(
            "k", ["r1", "r2"], version=second, expected=first, replace=False, metadata={"p": [1, 2]}
        )
        head = await store.journal_head("k")
        entry = await store.journal_get("k")
        assert head is not None and entry is not None
        assert (head.key, head.records, head.version, head.metadata) == (
            "k",
            3,
            second,
            {"p": [1, 2]},
        )
        assert head.created_at == entry.created_at

    @with_journal_store
    async def test_a_rebase_keeps_the_history_and_reads_from_the_new_base(
        self, store: JournalStore
    ) -> None:
        version = await _create(store, "k", "b0")
        for step in (["d1", "d2"], ["b3", "d4"], ["d5"], ["b6"]):
            following = new_version()
            assert await store.journal_write(
                "k",
                step,
                version=following,
                expected=version,
                replace=False,
                rebase=step[0].startswith("b"),
            )
            version = following
        entry = await store.journal_get("k")
        history = await store.journal_get("k", history=True)
        head = await store.journal_head("k")
        assert entry is not None and history is not None and head is not None
        assert (entry.records, entry.start) == (["b6"], 6)
        assert (history.records, history.start) == (["b0", "d1", "d2", "b3", "d4", "d5", "b6"], 0)
        assert (head.records, head.base, head.start) == (1, 6, 0)
        assert await store.journal_write(
            "k", ["d7"], version=new_version(), expected=version, replace=False
        )
        entry = await store.journal_get("k")
        assert entry is not None and (entry.records, entry.start) == (["b6", "d7"], 6)

    @with_journal_store
    async def test_a_rebase_drops_what_retention_lets_go_and_numbers_do_not_shift(
        self, store: JournalStore
    ) -> None:
        version = await _create(store, "k", "b0")
        for step, drop in ((["d1"], None), (["b2", "d3"], None), (["b4"], 2), (["d5"], None)):
            following = new_version()
            assert await store.journal_write(
                "k",
                step,
                version=following,
                expected=version,
                replace=False,
                rebase=step[0].startswith("b"),
                drop_before=drop,
            )
            version = following
        history = await store.journal_get("k", history=True)
        head = await store.journal_head("k")
        assert history is not None and head is not None
        assert (history.records, history.start) == (["b2", "d3", "b4", "d5"], 2)
        assert (head.records, head.base, head.start) == (2, 4, 2)
        # dropping past the new base keeps the base: a journal always has it
        following = new_version()
        assert await store.journal_write(
            "k",
            ["b6"],
            version=following,
            expected=version,
            replace=False,
            rebase=True,
            drop_before=99,
        )
        history = await store.journal_get("k", history=True)
        assert history is not None and (history.records, history.start) == (["b6"], 6)
        # a replace starts the numbering again and forgets the history
        assert await store.journal_write(
            "k", ["n0"], version=new_version(), expected=following, replace=True
        )
        history = await store.journal_get("k", history=True)
        head = await store.journal_head("k")
        assert history is not None and head is not None
        assert (history.records, history.start, head.base, head.start) == (["n0"], 0, 0, 0)
        await store.delete("k")
        assert await store.journal_get("k", history=True) is None

    @with_journal_store
    async def test_a_rebase_that_loses_the_comparison_changes_nothing(
        self, store: JournalStore
    ) -> None:
        version = await _create(store, "k", "b0")
        assert not await store.journal_write(
            "k",
            ["b1"],
            version=new_version(),
            expected="stale",
            replace=False,
            rebase=True,
            drop_before=1,
        )
        entry = await store.journal_get("k", history=True)
        assert entry is not None and (entry.records, entry.start, entry.version) == (
            ["b0"],
            0,
            version,
        )
        with pytest.raises(ValueError, match="rebase"):
            await store.journal_write(
                "k", ["x"], version=new_version(), expected=version, replace=True, rebase=True
            )
        with pytest.raises(ValueError, match="drop_before"):
            await store.journal_write(
                "k", ["x"], version=new_version(), expected=version, replace=False, drop_before=0
            )
