"""A new journal base writes an in-flight conversation once, and reads back exactly."""

from __future__ import annotations

from typing import Any

import orjson

from oma import jsonutil
from oma.checkpoint.delta import apply
from oma.checkpoint.journal import base_records


def _message(n: int) -> dict[str, Any]:
    return {
        "role": "user" if n % 2 else "assistant",
        "content": [{"type": "text", "text": f"m{n} " * 30}],
    }


def _wire(conversation: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 4,
        "createdAt": "t",
        "inFlightTasks": [
            {"taskId": "a", "conversationMessages": conversation, "messages": messages, "turns": 3},
            {"taskId": "b", "conversationMessages": [], "messages": [], "turns": 0},
        ],
        "completedTaskResults": [],
    }


def _read(records: list[str]) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(records[0])
    for record in records[1:]:
        apply(document, orjson.loads(record))
    return document


def test_a_conversation_held_twice_is_written_once_in_a_base() -> None:
    conversation = [_message(n) for n in range(40)]
    wire = _wire(conversation, conversation[1:])
    records = base_records(wire)
    assert len(records) == 2
    assert orjson.loads(records[0])["inFlightTasks"][0]["messages"] == []
    assert _read(records) == wire
    assert jsonutil.dumps(_read(records)) == jsonutil.dumps(wire)  # key order too
    assert sum(map(len, records)) < 0.55 * len(jsonutil.dumps(wire))


def test_messages_that_are_not_the_conversation_s_tail_still_read_back_exactly() -> None:
    conversation = [_message(n) for n in range(20)]
    own = [_message(n) for n in range(100, 112)]  # after a context compaction, say
    wire = _wire(conversation, [*own, *conversation[15:]])
    assert _read(base_records(wire)) == wire


def test_a_snapshot_without_in_flight_messages_is_one_record() -> None:
    wire = _wire([], [])
    assert base_records(wire) == [jsonutil.dumps(wire)]
    assert base_records({"version": 4, "inFlightTasks": "not a list"}) == [
        jsonutil.dumps({"version": 4, "inFlightTasks": "not a list"})
    ]
