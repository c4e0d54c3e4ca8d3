"""A journal's long lists written once, as segments its bases name (``oma.checkpoint.segments``).

Real runs (a scripted model, a real tool) into the in-memory store and the server stores: every
boundary the history rebuilds is the document saved then, the bases stay small, a restore reads
a short tail, and a claim names the segments already written instead of writing them again.
Then the store as an adversary: a changed, lost or forged segment, a base that names nonsense,
a segments journal another writer appended to or rebased; each is refused before anything runs,
or read right.
"""

from __future__ import annotations

import pytest

from oma import jsonutil
from oma.checkpoint import Checkpoint, chain, segments
from oma.checkpoint.history import Boundary, read_history
from oma.checkpoint.journal import TAIL_FLOOR, TAIL_SHARE
from oma.checkpoint.keys import checkpoint_key, segments_journal_key
from oma.checkpoint.stored import remove_checkpoint, saved_checkpoints
from oma.errors import CheckpointDecodeError
from oma.store import InMemoryStore, JournalStore
from oma.store.journal import JournalEntry
from tests.engine.long_runs import RUN_ID, StopsAt, run_long

KEY = checkpoint_key(RUN_ID)
SIDE = segments_journal_key(KEY)


def _body(record: str) -> object:
    return jsonutil.loads(chain.body(record))


def _chained(base: str, texts: dict[int, str]) -> set[int]:
    """Every segment a base leads to, each list followed back from the last it names."""
    named, _ = segments.resolve(_body(base), texts)
    return {ref.number for refs in named.values() for ref in refs}


async def test_a_long_run_names_its_lists_by_segments_and_every_boundary_is_as_saved(
    journal_store: JournalStore, recorded: list[str]
) -> None:
    await run_long(journal_store, StopsAt(120, stop=80))
    first_attempt = len(recorded)
    written_before_claim = await journal_store.journal_get(SIDE, history=True)
    assert written_before_claim is not None and len(written_before_claim.records) >= 3
    await run_long(journal_store, StopsAt(120, stop=None), restore=True)

    history = await read_history(journal_store, KEY)
    assert history is not None
    boundaries = history.boundaries()
    for boundary, saved in zip(boundaries, recorded, strict=True):
        assert jsonutil.dumps(history.rebuild(boundary.seq)) == saved, boundary
    assert history.verify() == []
    bases = [b for b in boundaries if b.kind == "base"]
    # a base weighs the run's small state, not its conversation (the snapshot is ~100 KB)
    assert max(b.bytes for b in bases[1:]) < len(recorded[-1]) / 8, bases
    # the claim of attempt 2 names the segments attempt 1 wrote: none written again
    claim = boundaries[first_attempt]
    assert claim.what == "attempt 2 began"
    last_of_attempt_1 = [b for b in bases if b.attempt == 1][-1]

    def named(boundary: Boundary) -> set[int]:
        base = history.records[boundary.numbers[0] - history.entry.start]
        return _chained(base.text, history.segment_texts)

    assert named(last_of_attempt_1) and named(last_of_attempt_1) <= named(claim)
    new = named(claim) - named(last_of_attempt_1)
    assert all(n >= len(written_before_claim.records) for n in new)
    latest = await Checkpoint(journal_store, run_id=RUN_ID).load_latest()
    assert latest is not None and latest.to_json() == recorded[-1]


async def test_a_restore_reads_a_short_tail(
    journal_store: JournalStore, recorded: list[str]
) -> None:
    await run_long(journal_store, StopsAt(150, stop=140))
    entry = await journal_store.journal_get(KEY)
    assert entry is not None
    base = entry.records[0]
    side = segments.by_number(await journal_store.journal_get(SIDE))
    named = _chained(base, side)
    weight = len(base) + sum(len(side[n]) for n in named)
    tail = sum(len(record) for record in entry.records[1:])
    largest = max(len(record) for record in entry.records[1:])
    assert tail <= max(weight * TAIL_SHARE, TAIL_FLOOR) + largest
    assert len(recorded[-1]) > 4 * max(weight * TAIL_SHARE, TAIL_FLOOR)  # the bound bites
    loaded = await Checkpoint(journal_store, run_id=RUN_ID).load_latest()
    assert loaded is not None and loaded.to_json() == recorded[-1]


async def _parked(store: InMemoryStore) -> tuple[JournalEntry, set[int]]:
    """A run parked with its task in flight; its journal and the segments its base names."""
    await run_long(store, StopsAt(80, stop=60))
    entry = await store.journal_get(KEY)
    assert entry is not None
    named = segments.named_numbers(_body(entry.records[0]))
    assert named
    return entry, named


def _replace_side(store: InMemoryStore, number: int, text: str) -> None:
    side = store._journals[SIDE]
    records = list(side.records)
    records[number - side.start] = text
    store._journals[SIDE] = side.model_copy(update={"records": records})


async def _refused(store: InMemoryStore, *, says: str) -> None:
    model = StopsAt(80, stop=None)
    with pytest.raises(CheckpointDecodeError) as raised:
        await run_long(store, model, restore=True)
    assert says in str(raised.value), str(raised.value)
    assert model.calls == 0  # nothing ran: not a model turn, so no tool call either


async def test_a_changed_segment_is_refused_and_named_by_verify() -> None:
    store = InMemoryStore()
    _, named = await _parked(store)
    number = max(named)
    text = store._journals[SIDE].records[number - store._journals[SIDE].start]
    assert " n" in text
    _replace_side(store, number, text.replace(" n", " m", 1))  # still JSON, still a list
    await _refused(store, says=f"segment {number} changed since it was named")
    history = await read_history(store, KEY)
    assert history is not None
    (found,) = history.verify()  # the segment itself, not each base that names it
    assert (found.number, found.segment) == (number, True)
    assert "changed" in found.problem


async def test_a_lost_segments_journal_is_refused() -> None:
    store = InMemoryStore()
    _, named = await _parked(store)
    await store.delete(SIDE)
    await _refused(store, says="is missing from the store")
    history = await read_history(store, KEY)
    assert history is not None
    found = history.verify()
    assert {f.number for f in found} >= named and all(f.segment for f in found)


@pytest.mark.parametrize(
    "placeholder",
    [
        {"$segments": "3", "rest": []},
        {"$segments": [0, "0" * 32], "rest": []},
        {"$segments": [-1, "0" * 32, 1], "rest": []},
        {"$segments": [0, "0" * 32, 0], "rest": []},
        {"$segments": [0, "0" * 32, 1], "rest": [], "more": 1},
        {"$segments": [0, "0" * 32, 1], "rest": "none"},
        {"$segments": [10**6, "0" * 32, 1], "rest": []},
        "twice",  # the conversation's segments named again, for the tool calls
    ],
)
async def test_a_base_naming_nonsense_is_refused(placeholder: dict[str, object] | str) -> None:
    store = InMemoryStore()
    entry, _ = await _parked(store)
    line, body = chain.split(entry.records[0])
    assert line is not None
    document = jsonutil.loads(body)
    task = document["inFlightTasks"][0]
    if placeholder == "twice":
        task["toolCalls"] = task["conversationMessages"]
    else:
        task["conversationMessages"] = placeholder
    records = [chain.headed(chain.parse_header(line), jsonutil.dumps(document))]
    store._journals[KEY] = entry.model_copy(update={"records": records + entry.records[1:]})
    await _refused(store, says="journal base")


async def test_a_segment_that_is_not_its_items_is_refused() -> None:
    store = InMemoryStore()
    entry, _ = await _parked(store)
    line, body = chain.split(entry.records[0])
    assert line is not None
    document = jsonutil.loads(body)
    placeholder = document["inFlightTasks"][0]["conversationMessages"]
    number, _, total = placeholder["$segments"]
    side = store._journals[SIDE]
    header, _ = side.records[number - side.start].split("\n", 1)
    count = jsonutil.loads(header)["items"]
    assert count > 1
    # a store that rewrote the segment and the base alike: the count still tells
    forged = header + "\n" + jsonutil.dumps([{"role": "user", "content": []}])
    _replace_side(store, number, forged)
    placeholder["$segments"] = [number, chain.digest(forged), total]
    records = [chain.headed(chain.parse_header(line), jsonutil.dumps(document))]
    store._journals[KEY] = entry.model_copy(update={"records": records + entry.records[1:]})
    await _refused(store, says=f"segment {number} does not hold the {count} items it says")


async def test_segments_another_writer_appended_or_rebased_are_read_past(
    recorded: list[str],
) -> None:
    store = InMemoryStore()
    await _parked(store)
    head = await store.journal_head(SIDE)
    assert head is not None
    # a writer that lost the run appended two segments, then rebased the journal past them all
    for rebase in (False, True):
        version = f"other-{rebase}"
        written = await store.journal_write(
            SIDE,
            ["[1]", "[2]"],
            version=version,
            expected=head.version,
            replace=False,
            rebase=rebase,
        )
        assert written
        head = await store.journal_head(SIDE)
        assert head is not None
    await run_long(store, StopsAt(80, stop=None), restore=True)
    loaded = await Checkpoint(store, run_id=RUN_ID).load_latest()
    assert loaded is not None and loaded.to_json() == recorded[-1]
    history = await read_history(store, KEY)
    assert history is not None and history.verify() == []
    for boundary, saved in zip(history.boundaries(), recorded, strict=True):
        assert jsonutil.dumps(history.rebuild(boundary.seq)) == saved


async def test_the_segments_go_with_their_checkpoint(journal_store: JournalStore) -> None:
    await run_long(journal_store, StopsAt(60, stop=50))
    assert await journal_store.journal_version(SIDE) is not None
    listed = await saved_checkpoints(journal_store)
    assert [c.key for c in listed.checkpoints] == [KEY]  # the segments are no run of their own
    assert await remove_checkpoint(journal_store, KEY)
    assert await journal_store.journal_version(SIDE) is None
