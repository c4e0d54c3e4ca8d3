"""A run's past kept in its journal: every boundary listed, rebuilt as it was saved, checked.

Real runs (a scripted model, a real tool) into the in-memory store and the server stores;
every save is recorded as the saver handed it to the journal, and each boundary the history
rebuilds is compared with that recording, byte for byte.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from oma import jsonutil
from oma.checkpoint import Checkpoint, chain
from oma.checkpoint.history import History, read_history
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.retention import HistoryPolicy
from oma.errors import CheckpointHistoryError
from oma.store import InMemoryStore, JournalStore
from oma.store.journal import JournalEntry
from tests.engine.long_runs import RUN_ID, StopsAt, run_long, segment_texts


async def test_every_boundary_of_a_resumed_run_is_rebuilt_as_it_was_saved(
    journal_store: JournalStore, recorded: list[str]
) -> None:
    await run_long(journal_store, StopsAt(60, stop=40))
    first_attempt = len(recorded)
    await run_long(journal_store, StopsAt(60, stop=None), restore=True)
    history = await read_history(journal_store, checkpoint_key(RUN_ID))
    assert history is not None
    boundaries = history.boundaries()
    assert [b.seq for b in boundaries] == list(range(1, len(recorded) + 1))
    for boundary, saved in zip(boundaries, recorded, strict=True):
        assert jsonutil.dumps(history.rebuild(boundary.seq)) == saved, boundary
    # compactions and the claim appended bases instead of replacing what came before
    bases = [b for b in boundaries if b.kind == "base"]
    assert len(bases) >= 3 and boundaries[0].kind == "base"
    claim = boundaries[first_attempt]
    assert (claim.kind, claim.attempt, claim.what) == ("base", 2, "attempt 2 began")
    assert {b.attempt for b in boundaries} == {1, 2}
    assert any(b.what == "1 tool call committed" for b in boundaries)
    assert [b.what for b in boundaries[-2:]] == ["task completed", "run finished"]
    assert history.verify() == []
    # the latest, as a restore reads it, is the last boundary
    latest = await Checkpoint(journal_store, run_id=RUN_ID).load_latest()
    assert latest is not None and latest.to_json() == recorded[-1]


async def test_one_flipped_byte_is_found_at_exactly_its_record(recorded: list[str]) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(12, stop=None))
    key = checkpoint_key(RUN_ID)
    entry = await store.journal_get(key, history=True)
    assert entry is not None
    side = await segment_texts(store)
    count = len(entry.records)
    for number in range(count):
        for where in ("header", "body", "prev"):
            text = entry.records[number]
            line, _ = chain.split(text)
            assert line is not None
            if where == "header":
                at = text.index('"what":"') + 9
            elif where == "prev":
                if '"prev":null' in text[: len(line)]:
                    continue
                at = text.index('"prev":"') + 10
            else:
                at = len(line) + 1 + (len(text) - len(line)) // 2
            flipped = text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :]
            damaged = entry.model_copy(
                update={"records": [*entry.records[:number], flipped, *entry.records[number + 1 :]]}
            )
            findings = History.of(damaged, side).verify()
            assert [f.number for f in findings] == [number], (number, where, findings)


async def test_retention_keeps_the_boundaries_asked_and_every_one_still_rebuilds(
    recorded: list[str],
) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(80, stop=None), history=HistoryPolicy(keep=10))
    history = await read_history(store, checkpoint_key(RUN_ID))
    assert history is not None
    boundaries = history.boundaries()
    seqs = [b.seq for b in boundaries]
    assert seqs[-1] == len(recorded)
    assert len(recorded) - 10 + 1 >= seqs[0] > 1  # at least the last 10, not everything
    assert boundaries[0].kind == "base" and history.entry.start > 0
    for boundary in boundaries:
        assert jsonutil.dumps(history.rebuild(boundary.seq)) == recorded[boundary.seq - 1]
    assert history.verify() == []  # a dropped past is not a broken chain
    with pytest.raises(
        CheckpointHistoryError, match=r"boundary 1 is not kept: this journal keeps boundaries"
    ):
        history.rebuild(1)


async def test_history_off_keeps_the_latest_only_in_the_old_record_form(
    recorded: list[str],
) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(40, stop=None), history=None)
    entry = await store.journal_get(checkpoint_key(RUN_ID), history=True)
    assert entry is not None and entry.start == 0
    assert not any(r.startswith(chain.HEADER_START) for r in entry.records)
    assert len(entry.records) < len(recorded)  # compactions replaced the journal
    latest = await Checkpoint(store, run_id=RUN_ID).load_latest()
    assert latest is not None and latest.to_json() == recorded[-1]
    # listed without headers: the base written in two records is one boundary, as saved
    history = History.of(entry)
    first = history.boundaries()[0]
    assert first.numbers == (0, 1) and first.kind == "base"
    assert jsonutil.dumps(history.rebuild(first.seq)) in recorded


async def test_two_adjacent_records_changed_are_both_named(recorded: list[str]) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(12, stop=None))
    entry = await store.journal_get(checkpoint_key(RUN_ID), history=True)
    assert entry is not None
    side = await segment_texts(store)
    records = list(entry.records)
    for number in (5, 6):  # still JSON that applies: an operation added, no syntax broken
        line, body = chain.split(records[number])
        assert line is not None and body.endswith("]")
        records[number] = line + "\n" + body[:-1] + ',["s",["forged"],1]]'

    findings = History.of(entry.model_copy(update={"records": records}), side).verify()
    assert [f.number for f in findings] == [5, 6], findings
    assert all("its content is not what it was written with" in f.problem for f in findings)
    # the same for two adjacent headers changed (each record's own values are sealed)
    records = list(entry.records)
    for number in (3, 4):
        line, body = chain.split(records[number])
        assert line is not None
        header = json.loads(line) | {"what": "nothing happened"}
        records[number] = json.dumps(header, separators=(",", ":")) + "\n" + body
    findings = History.of(entry.model_copy(update={"records": records}), side).verify()
    assert [f.number for f in findings] == [3, 4], findings


async def test_a_journal_from_before_histories_continued_with_one_verifies(
    recorded: list[str],
) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(30, stop=20), history=None)
    await run_long(store, StopsAt(30, stop=None), restore=True)
    history = await read_history(store, checkpoint_key(RUN_ID))
    assert history is not None
    assert history.records[0].header is None and history.records[-1].header is not None
    assert history.verify() == []
    whats = [b.what for b in history.boundaries()]
    assert "attempt 2 began" in whats and whats[-1] == "run finished"
    seqs = [b.seq for b in history.boundaries()]
    assert seqs == list(range(1, len(seqs) + 1))  # numbered on without a gap
    latest = await Checkpoint(store, run_id=RUN_ID).load_latest()
    assert latest is not None and latest.to_json() == recorded[-1]


def test_a_header_with_an_impossible_time_is_a_finding_not_a_crash() -> None:
    body = '{"version":4}'
    header = {
        "seq": 1,
        "prev": None,
        "sha": chain.digest(body),
        "at": 10**20,
        "attempt": 1,
        "kind": "base",
        "task": None,
        "what": "run started",
    }
    text = json.dumps(header, separators=(",", ":")) + "\n" + body
    entry = JournalEntry(
        key="k", records=[text], version="v", created_at=datetime.now(UTC), start=0
    )
    history = History.of(entry)
    (finding,) = history.verify()
    assert finding.number == 0 and "at" in finding.problem
    assert history.boundaries()[0].at is None  # listed, without a time it cannot show


async def test_a_damaged_last_header_does_not_break_the_numbering(recorded: list[str]) -> None:
    store = InMemoryStore()
    await run_long(store, StopsAt(20, stop=10))
    key = checkpoint_key(RUN_ID)
    entry = store._journals[key]
    line, body = chain.split(entry.records[-1])
    assert line is not None
    last_seq = json.loads(line)["seq"]
    damaged = [*entry.records[:-1], '{"seq":"x"}\n' + body]
    store._journals[key] = entry.model_copy(update={"records": damaged})
    await run_long(store, StopsAt(20, stop=None), restore=True)
    history = await read_history(store, key)
    assert history is not None
    claim = next(b for b in history.boundaries() if b.what == "attempt 2 began")
    assert claim.seq == last_seq + 1  # numbered on from the damaged one's place
    findings = history.verify()
    assert [f.number for f in findings] == [len(damaged) - 1 + entry.start], findings
