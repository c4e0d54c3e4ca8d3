"""A journal writer's segments (``oma.checkpoint.segments``) on the in-memory store, with
documents built by hand: what a base names, what a reader puts back, and the cases a run
rarely reaches (a list that changed under its segments, another writer's appends, items nested
past the limit)."""

from __future__ import annotations

from typing import Any

from oma import jsonutil
from oma.checkpoint import chain, segments
from oma.checkpoint.journal import JournalWriter, load_journal
from oma.checkpoint.keys import segments_journal_key
from oma.checkpoint.retention import HistoryPolicy
from oma.store import InMemoryStore

KEY = "__oma_checkpoint__/seg-unit/latest"
SIDE = segments_journal_key(KEY)


def _message(n: int, size: int = 200) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"{n} " + "x" * size}]}


def _wire(conversation: list[Any], calls: list[Any] | None = None) -> dict[str, Any]:
    task = {"taskId": "t1", "conversationMessages": conversation, "toolCalls": calls or []}
    return {"version": 4, "createdAt": "2026-12-07T00:00:00.000Z", "inFlightTasks": [task]}


async def _writer(store: InMemoryStore, wire: dict[str, Any]) -> JournalWriter:
    writer = JournalWriter(store, KEY, fenced=True, history=HistoryPolicy())
    assert await writer.start(wire, {}, "run started")
    return writer


async def _loaded(store: InMemoryStore, depth: int | None = None) -> tuple[Any, Any]:
    found = await load_journal(store, KEY, depth)
    assert found is not None
    return found


async def _base(store: InMemoryStore) -> dict[str, Any]:
    entry = await store.journal_get(KEY)
    assert entry is not None
    document = jsonutil.loads(chain.body(entry.records[0]))
    assert isinstance(document, dict)
    return document


async def test_a_base_names_a_long_list_by_its_last_segment_and_reads_back_equal() -> None:
    store = InMemoryStore()
    wire = _wire([_message(n) for n in range(20)])
    await _writer(store, wire)
    placeholder = (await _base(store))["inFlightTasks"][0]["conversationMessages"]
    number, digest, items = placeholder[segments.MARK]
    assert (number, items, placeholder["rest"]) == (0, 20, [])
    side = await store.journal_get(SIDE)
    assert side is not None and chain.digest(side.records[0]) == digest
    document, stored = await _loaded(store)
    assert document == wire
    assert [ref.items for ref in stored.segments[("t1", "conversationMessages")]] == [20]


async def test_items_too_few_for_a_segment_stay_in_the_base() -> None:
    store = InMemoryStore()
    wire = _wire([_message(0, size=10)])
    await _writer(store, wire)
    assert await store.journal_version(SIDE) is None  # nothing written beside it
    base = await _base(store)
    assert (
        base["inFlightTasks"][0]["conversationMessages"]
        == wire["inFlightTasks"][0]["conversationMessages"]
    )


async def test_a_second_base_chains_its_new_items_to_the_segments_already_written() -> None:
    store = InMemoryStore()
    first = [_message(n) for n in range(20)]
    writer = await _writer(store, _wire(first))
    longer = _wire([*first, *(_message(n) for n in range(20, 40))])
    await writer._replace_or_stop(longer, {}, writer.current.version, 1)  # type: ignore[union-attr]
    side = await store.journal_get(SIDE)
    assert side is not None and len(side.records) == 2  # the first 20 were not written again
    header = jsonutil.loads(side.records[1].split("\n", 1)[0])
    assert header == {"prev": [0, chain.digest(side.records[0])], "items": 20}
    document, stored = await _loaded(store)
    assert document == longer
    assert [r.number for r in stored.segments[("t1", "conversationMessages")]] == [0, 1]


async def test_a_list_that_changed_under_its_segments_gets_new_ones() -> None:
    store = InMemoryStore()
    writer = await _writer(store, _wire([_message(n) for n in range(20)]))
    started_over = _wire([_message(n + 100) for n in range(25)])  # the task began again
    await writer._replace_or_stop(started_over, {}, writer.current.version, 1)  # type: ignore[union-attr]
    side = await store.journal_get(SIDE)
    assert side is not None and len(side.records) == 2
    assert jsonutil.loads(side.records[1].split("\n", 1)[0])["prev"] is None
    document, _ = await _loaded(store)
    assert document == started_over


async def test_another_writer_s_appends_are_numbered_past() -> None:
    store = InMemoryStore()
    first = [_message(n) for n in range(20)]
    writer = await _writer(store, _wire(first))
    head = await store.journal_head(SIDE)
    assert head is not None
    assert await store.journal_write(
        SIDE, ["{}\n[]"], version="x", expected=head.version, replace=False
    )
    longer = _wire([*first, *(_message(n) for n in range(20, 40))])
    await writer._replace_or_stop(longer, {}, writer.current.version, 1)  # type: ignore[union-attr]
    document, stored = await _loaded(store)
    assert document == longer
    assert [r.number for r in stored.segments[("t1", "conversationMessages")]] == [0, 2]


async def test_items_nested_past_the_limit_are_not_vouched_for() -> None:
    deep: Any = "bottom"
    for _ in range(300):
        deep = [deep]
    store = InMemoryStore()
    await _writer(store, _wire([_message(n) for n in range(10)], calls=[{"input": deep}]))
    _, stored = await _loaded(store, depth=200)
    assert stored.within_depth is False  # the reader measures the document and refuses it
    plain = InMemoryStore()
    await _writer(plain, _wire([_message(n) for n in range(10)]))
    _, stored = await _loaded(plain, depth=200)
    assert stored.within_depth is True
