"""A journal writer's segments (``oma.checkpoint.segments``) on the in-memory store, with
documents built by hand: what a base names, what a reader puts back, and the cases a run
rarely reaches (a list that changed under its segments, another writer's appends, items nested
past the limit)."""

from __future__ import annotations

from typing import Any

import pytest

from oma import jsonutil
from oma.checkpoint import chain, segments
from oma.checkpoint.journal import JournalWriter, load_journal
from oma.checkpoint.keys import segments_journal_key
from oma.checkpoint.retention import HistoryPolicy
from oma.checkpoint.stored import remove_checkpoint
from oma.errors import CheckpointDecodeError
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


async def test_an_unfenced_writer_whose_checkpoint_was_deleted_writes_its_segments_again() -> None:
    """Last one wins: its next save replaces the journal, naming only segments it writes then
    (it named segments of the deleted segments journal before: a checkpoint no restore read)."""
    store = InMemoryStore()
    writer = JournalWriter(store, KEY, fenced=False, history=HistoryPolicy())
    await writer.save(_wire([_message(n) for n in range(20)]), {}, 1)
    await writer.save(_wire([_message(n) for n in range(40)]), {}, 1)
    assert await remove_checkpoint(store, KEY)  # deleted while the run goes on
    for more in (0, 20):
        handed = _wire([_message(n) for n in range(40 + more)])
        await writer.save(handed, {}, 1)
        document, _ = await _loaded(store)
        assert document == handed


async def test_segments_left_by_a_base_that_never_landed_go_with_a_delete() -> None:
    store = InMemoryStore()
    assert await store.journal_write(
        SIDE, ['{"prev":null,"items":1}\n[1]'], version="v", expected=None, replace=True
    )
    assert not await remove_checkpoint(store, KEY)  # no checkpoint there
    assert await store.journal_version(SIDE) is None


async def test_a_base_naming_one_chain_from_many_places_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forged base: 2,000 lists all naming one chain of 1,000 segments. Refused after at most
    two walks of it, by restore and by verify (each segment hashed a bounded number of times),
    not in work quadratic in what the store returned."""
    store = InMemoryStore()
    writer = await _writer(store, _wire([_message(0)]))
    texts: list[str] = []
    prev: segments.SegmentRef | None = None
    for number in range(1000):
        text = segments.record(prev, 1, "[1]")
        texts.append(text)
        prev = segments.SegmentRef(number, chain.digest(text), 1)
    assert prev is not None
    await store.delete(SIDE)
    assert await store.journal_write(SIDE, texts, version="v", expected=None, replace=True)
    entry = await store.journal_get(KEY)
    assert entry is not None and writer.current is not None
    line, body = chain.split(entry.records[0])
    assert line is not None
    document = jsonutil.loads(body)
    named = {segments.MARK: [prev.number, prev.digest, 1000], "rest": []}
    document["inFlightTasks"] = [
        {"taskId": f"t{n}", "conversationMessages": named, "toolCalls": named} for n in range(1000)
    ]
    forged = chain.headed(chain.parse_header(line), jsonutil.dumps(document))
    store._journals[KEY] = entry.model_copy(update={"records": [forged]})
    hashed = headers = 0
    digest, header = chain.digest, segments._header

    def counted(text: str) -> str:
        nonlocal hashed
        hashed += 1
        return digest(text)

    def read(number: int, line: str) -> tuple[tuple[int, str] | None, int]:
        nonlocal headers
        headers += 1
        return header(number, line)

    monkeypatch.setattr(chain, "digest", counted)
    monkeypatch.setattr(segments, "_header", read)
    with pytest.raises(CheckpointDecodeError, match="names a segment twice"):
        await load_journal(store, KEY, 200)
    # the read's look for what to fetch once, then resolve's walks of the first two lists
    assert hashed <= 2 * 1000 + 10 and headers <= 3 * 1000 + 10
    # verify's check of what a base names (the history shares what it found right)
    hashed = 0
    assert segments.check(document, segments.by_number(await store.journal_get(SIDE)), {}) == {}
    assert hashed <= 1000 + 10


@pytest.mark.parametrize(
    "text",
    ["caf\u00e9 \u2603 \U0001f600", "lone \ud800 surrogate", "\u202e bidi \x1b[31m"],
    ids=["non-ascii", "lone-surrogate", "controls"],
)
async def test_segments_holding_any_json_string_read_back_exactly(text: str) -> None:
    # Segments are read as UTF-8 (encoded once for the digest and the parse): text orjson
    # refuses (a lone surrogate) must still come back as written, not altered or refused.
    store = InMemoryStore()
    wire = _wire([_message(n) for n in range(10)] + [_message(0) | {"note": text}])
    await _writer(store, wire)
    document, _ = await _loaded(store, depth=200)
    assert document == wire
    assert document["inFlightTasks"][0]["conversationMessages"][-1]["note"] == text


async def test_a_long_integer_in_a_segment_reads_back_exact() -> None:
    store = InMemoryStore()
    big = 2**64 + 1  # orjson would read it as a float
    calls = [{"toolName": "t", "input": {"n": big}, "output": "x" * 300} for _ in range(8)]
    wire = _wire([_message(n) for n in range(10)], calls)
    await _writer(store, wire)
    document, _ = await _loaded(store, depth=200)
    assert document == wire
    assert type(document["inFlightTasks"][0]["toolCalls"][0]["input"]["n"]) is int


async def test_two_completed_results_of_one_task_never_make_a_base_unreadable() -> None:
    # The engine writes one result per task, but a forked run's patch, or a reference process,
    # may leave two under one task id: their lists share an id, and a later base named one
    # segment for both, which no restore would read ("it names a segment twice"). Such lists
    # stay whole in the base.
    def result() -> dict[str, Any]:
        messages = [_message(n) for n in range(10)]
        return {"taskId": "t1", "agentResult": {"success": True, "messages": messages}}

    store = InMemoryStore()
    wire: dict[str, Any] = {**_wire([]), "completedTaskResults": [result(), result()]}
    writer = await _writer(store, wire)
    for n in range(40):  # enough saves for several new bases
        extra = {"taskId": f"x{n}", "agentResult": {"success": True, "output": "y" * 400}}
        wire = {**wire, "completedTaskResults": [*wire["completedTaskResults"], extra]}
        await writer.save(wire, {}, 1)
        document, _ = await _loaded(store, depth=200)
        assert document == wire
    entry = await store.journal_get(KEY, history=True)
    assert entry is not None
    headers = [chain.split(record)[0] for record in entry.records]
    kinds = [chain.parse_header(line).kind for line in headers if line is not None]
    assert kinds.count("base") >= 2  # a later base was written, and read back above
