"""Journal deltas: ``apply(copy(old), diff(old, new))`` encodes to exactly ``new``'s text."""

from __future__ import annotations

import copy
import itertools
import random
import weakref
from typing import Any

import orjson
import pytest

from oma.agent.state import RunnerState
from oma.checkpoint.delta import apply, relative, resolved
from oma.checkpoint.delta_diff import AppendedList, DeltaEncoder, diff
from oma.checkpoint.journal import assemble_journal
from oma.errors import CheckpointDecodeError
from oma.llm.types import LLMMessage, TextBlock
from oma.store.journal import JournalEntry


def _round_trip(
    old: dict[str, Any], new: dict[str, Any], encoder: DeltaEncoder | None = None
) -> list[list[Any]]:
    ops = (encoder or DeltaEncoder()).diff(old, new)
    for form in (ops, relative(ops)):  # what a journal record holds: paths written short
        wire = orjson.loads(orjson.dumps(form))
        rebuilt = apply(orjson.loads(orjson.dumps(old)), wire)
        assert orjson.dumps(rebuilt) == orjson.dumps(new)
    assert resolved(relative(ops)) == ops
    return ops


def _message(n: int) -> dict[str, Any]:
    return {
        "role": "assistant" if n % 2 else "user",
        "content": [{"type": "text", "text": f"m{n}"}],
    }


def _said(text: str) -> LLMMessage:
    return LLMMessage(role="user", content=[TextBlock(text=text)])


def _nested(levels: int) -> Any:
    """``levels`` lists around a string."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def test_equal_documents_need_no_operation() -> None:
    doc = {"a": [1, 2], "b": {"c": "d"}}
    assert _round_trip(doc, copy.deepcopy(doc)) == []


def test_a_message_appended_to_a_conversation_and_its_tail_is_written_once() -> None:
    conversation = [_message(n) for n in range(10)]
    old = {
        "createdAt": "t1",
        "inFlightTasks": [{"conv": conversation, "messages": conversation[1:]}],
    }
    grown = [*conversation, _message(10)]
    new = {"createdAt": "t2", "inFlightTasks": [{"conv": grown, "messages": grown[1:]}]}
    ops = _round_trip(old, new)
    assert [op[0] for op in ops] == ["s", "x", "c"]
    assert orjson.dumps(ops).count(b"m10") == 1


def test_a_value_written_by_the_previous_delta_is_copied_not_written_again() -> None:
    encoder = DeltaEncoder()
    record = {"toolName": "note", "input": {"note": "x" * 80}, "output": "noted " + "x" * 80}
    first: dict[str, Any] = {"pending": [], "toolCalls": []}
    second = {"pending": [{"commit": {"record": record}}], "toolCalls": []}
    third = {"pending": [], "toolCalls": [copy.deepcopy(record)]}
    _round_trip(first, second, encoder)
    ops = _round_trip(second, third, encoder)
    assert ["w", ["toolCalls", 0], ["pending", 0, "commit", "record"]] in ops
    assert b"noted" not in orjson.dumps(ops)


def test_a_value_written_twice_in_one_delta_is_written_once() -> None:
    call = {"type": "tool_use", "id": "c1", "name": "note", "input": {"note": "y" * 80}}
    old: dict[str, Any] = {"conversation": [], "pending": None}
    new = {
        "conversation": [{"role": "assistant", "content": [call]}],
        "pending": [{"call": dict(call)}],
    }
    ops = _round_trip(old, new)
    assert orjson.dumps(ops).count(b"y" * 80) == 1


def test_a_result_made_from_the_in_flight_conversation_is_copied_not_written() -> None:
    conversation = [_message(n) for n in range(50)]
    old = {
        "completed": [],
        "inFlightTasks": [{"conv": conversation, "messages": conversation[1:]}],
    }
    result = {
        "taskId": "t",
        "agentResult": {"output": "done", "messages": copy.deepcopy(conversation[1:])},
    }
    new = {"completed": [result], "inFlightTasks": []}
    ops = _round_trip(old, new)
    assert len(orjson.dumps(ops)) < 400, ops  # the 49 messages are one copy operation
    assert any(op[0] == "o" for op in ops)
    assert ["t", ["inFlightTasks"], 0] in ops


def test_paths_are_written_relative_to_the_operation_before() -> None:
    ops: list[list[Any]] = [
        ["s", ["inFlightTasks", 0, "phase"], "awaiting_model"],
        ["x", ["inFlightTasks", 0, "conversation"], [{"role": "user"}]],
        ["c", ["inFlightTasks", 0, "messages"], ["inFlightTasks", 0, "conversation"], 0, 1],
        ["s", ["createdAt"], "t1"],
    ]
    short = relative(ops)
    assert short == [
        ["s", ["inFlightTasks", 0, "phase"], "awaiting_model"],
        ["x", [2, "conversation"], [{"role": "user"}]],
        ["c", [2, "messages"], [2, "conversation"], 0, 1],
        ["s", ["createdAt"], "t1"],  # nothing in common: written whole
    ]
    assert len(orjson.dumps(short)) < len(orjson.dumps(ops)) - 40
    assert resolved(short) == ops


@pytest.mark.parametrize(
    "op",
    [
        ["s", [3, "phase"], 1],  # keeps 3 steps of a path that has 2
        ["s", [0, "phase"], 1],  # keeps none: not a relative path
        ["v", ["a", "b"], [5, "c"]],  # a source keeping more than its operation's path
    ],
)
def test_a_relative_path_keeping_steps_that_are_not_there_is_refused(op: list[Any]) -> None:
    doc = {"a": {"b": 1, "c": 2}}
    with pytest.raises(ValueError, match="keeps"):
        apply(doc, [["s", ["a", "b"], 1], op])
    assert doc == {"a": {"b": 1, "c": 2}}  # refused before anything changed


def test_a_long_string_written_before_is_copied_not_written_again() -> None:
    encoder = DeltaEncoder()
    output = "noted " + "z" * 90
    first: dict[str, Any] = {"pending": {"result": {"content": None}}, "calls": []}
    second = {"pending": {"result": {"content": output}}, "calls": []}
    third = {"pending": {"result": {"content": output}}, "calls": [{"n": 1, "output": output[:]}]}
    _round_trip(first, second, encoder)
    ops = _round_trip(second, third, encoder)
    assert b"z" * 90 not in orjson.dumps(ops)
    assert ["w", ["calls", 0, "output"], ["pending", "result", "content"]] in ops


def test_an_object_with_a_copied_part_is_written_around_it() -> None:
    """The object is written with null where the copied part goes (its keys in order), then
    the part is set by a copy: the part's bytes are not written twice."""
    call = {"type": "tool_use", "id": "c1", "name": "note", "input": {"note": "q" * 120}}
    old: dict[str, Any] = {"conversation": [], "pending": None}
    pending = {"call": dict(call), "state": "started", "attempt": 1}
    new = {"conversation": [{"role": "assistant", "content": [call]}], "pending": pending}
    ops = _round_trip(old, new)
    assert orjson.dumps(ops).count(b"q" * 120) == 1
    assert ["s", ["pending"], {"call": None, "state": "started", "attempt": 1}] in ops


def test_key_order_changes_are_kept_exactly() -> None:
    old = {"a": 1, "b": 2, "c": 3}
    new = {"a": 1, "c": 3, "b": 2, "d": 4}
    _round_trip(old, new)
    _round_trip(new, old)


def test_a_delta_that_does_not_belong_to_its_base_is_refused() -> None:
    ops = diff({"a": [1]}, {"a": [1, 2]})
    with pytest.raises(ValueError, match="does not apply"):
        apply({"b": 1}, ops)
    with pytest.raises(ValueError, match="does not apply"):
        apply({"a": [1]}, [["c", ["a"], ["a"], 0, 5]])
    with pytest.raises(ValueError, match="source does not exist"):
        apply({"a": [1]}, [["w", ["a", 0], ["b"]]])
    with pytest.raises(ValueError, match="does not apply"):
        apply({"a": [1]}, [["s", ["a", True], 2]])  # JSON true is not an index
    with pytest.raises(ValueError, match="does not apply"):
        apply({"a": [1]}, [["?", ["a"]]])


@pytest.mark.parametrize(
    "ops",
    [
        [["s", 5, 1], ["s", [1, "x"], 2]],  # relative to a path that is a number
        [["s", "ab", 1], ["s", [1, "x"], 2]],  # ... a string (len() would take it)
        [["s", ["a", -1], 2]],  # a negative index (Python would take the last item)
        [["s", ["a", 0, 0], 2]],  # a step into a number
        [["w", ["b"], ["s", 0]]],  # a step into a string (Python would index it)
        [["v", ["b"], ["a", "0"]]],  # a key into a list
        [["c", ["a"], ["n", 0], 0, 1]],  # a number where a key is expected
        [["s", [], 1]],  # the root
        [[["c"], ["a"], ["a"]]],  # a name that is a list (cannot be hashed)
        [[{}, ["a"], 1]],  # ... an object
        [["s", ["a", 5], _nested(1000)]],  # a value nested past what repr can print
        [[_nested(1000), ["a"], 1]],  # ... as the operation's name
        [["s", ["a", _nested(1000)], 1]],  # ... as a step
        [["v", ["b"], [_nested(1000)]]],  # ... as a copy's source step
    ],
)
def test_a_hostile_record_is_a_value_error_never_another_exception(ops: list[Any]) -> None:
    """A journal record from a store is refused as a bad record (``ValueError``, which the
    reader names as ``CheckpointDecodeError``), whatever its paths hold; its message shows a
    few levels of the record, however deep it nests."""
    doc: dict[str, Any] = {"a": [1], "s": "str", "n": {"0": [1]}}
    with pytest.raises(ValueError, match=r"does not|keeps|needs a non-empty path|resolve") as e:
        apply(doc, ops)
    assert len(str(e.value)) < 1000


def test_a_hostile_record_in_a_stored_journal_is_a_decode_error() -> None:
    """The same through the journal's reader, with the depth bound on (the restore's path)."""
    records = [orjson.dumps({"a": [1]}).decode(), orjson.dumps([[["c"], ["a"], ["a"]]]).decode()]
    records.append('[["s",["a",5],' + "[" * 1000 + '"x"' + "]" * 1000 + "]]")  # orjson reads it
    for record in records[1:]:
        entry = JournalEntry(
            key="k", records=[records[0], record], version="v", metadata={}, created_at=STAMP
        )
        with pytest.raises(CheckpointDecodeError, match="journal record 1"):
            assemble_journal(entry, "k", 200)


STAMP = "2026-12-07T00:00:00.000Z"


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(6 if depth > 0 else 3)
    if kind == 0:
        return rng.randrange(5)
    if kind == 1:
        return rng.choice(["x", "y", "", "z" * 3, "q" * 70])
    if kind == 2:
        return rng.choice([None, True, 1.5])
    if kind in (3, 4):
        return [_random_value(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {rng.choice("abcde"): _random_value(rng, depth - 1) for _ in range(rng.randrange(4))}


def _mutate(rng: random.Random, value: Any, depth: int) -> Any:
    """A changed copy sharing unchanged parts by identity, as the snapshot encoder does."""
    roll = rng.random()
    if roll < 0.35:
        return value
    if isinstance(value, dict) and roll < 0.8:
        out = {k: _mutate(rng, v, depth - 1) for k, v in value.items()}
        if rng.random() < 0.2:
            out[rng.choice("abcdef")] = _random_value(rng, depth)
        if out and rng.random() < 0.15:
            out.pop(rng.choice(list(out)))
        return out
    if isinstance(value, list) and roll < 0.8:
        out_list = [_mutate(rng, v, depth - 1) for v in value]
        if rng.random() < 0.4:
            out_list.extend(rng.choice([value, out_list, [_random_value(rng, depth)]])[:3])
        if out_list and rng.random() < 0.2:
            del out_list[rng.randrange(len(out_list)) :]
        return out_list
    return _random_value(rng, max(depth, 0))


def _random_documents(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    documents = [{k: _random_value(rng, 4) for k in "pqrs"}]
    for _ in range(6):  # a chain of deltas, as boundaries make them
        changed = _mutate(rng, documents[-1], 5)
        documents.append(changed if isinstance(changed, dict) else {"p": changed})
    return documents


def _check_chain(documents: list[dict[str, Any]]) -> None:
    """Each delta of the chain round trips alone, and the whole chain applied to one document
    copying on write (as a restore assembles a journal) gives each document in turn."""
    encoder = DeltaEncoder()  # one writer's chain: copies from the previous delta too
    built, shared = orjson.loads(orjson.dumps(documents[0])), set[int]()
    for old, new in itertools.pairwise(documents):
        ops = _round_trip(old, new, encoder)
        apply(built, orjson.loads(orjson.dumps(relative(ops))), shared)
        assert orjson.dumps(built) == orjson.dumps(new)


@pytest.mark.parametrize("seed", range(300))
def test_random_documents_round_trip(seed: int) -> None:
    _check_chain(_random_documents(seed))


def _conversations(seed: int) -> list[dict[str, Any]]:
    """Snapshot-shaped chains: messages appended to a conversation and its tail, records
    written twice, results made from a finished conversation, messages changed in place."""
    rng = random.Random(seed)
    doc: dict[str, Any] = {"createdAt": "t0", "completed": [], "inFlight": []}
    documents = [doc]
    conversation: list[Any] = []
    for step in range(60):
        message = {"role": rng.choice(["user", "assistant"]), "text": "w" * rng.randrange(90)}
        conversation = [*conversation, message]
        if len(conversation) > 2 and rng.random() < 0.3:  # a message written over in place
            at = rng.randrange(len(conversation))
            conversation[at] = {**conversation[at], "text": f"changed at {step}"}
        record = {"tool": "note", "output": "o" * rng.randrange(100), "n": step}
        in_flight: dict[str, Any] = {
            "conv": conversation,
            "messages": conversation[1:],
            "pending": [{"record": record}] if rng.random() < 0.5 else None,
            "calls": [copy.deepcopy(record)] * rng.randrange(2),
        }
        if len(conversation) > 2 and rng.random() < 0.3:  # one side of the shared items only
            messages = in_flight["messages"] = list(in_flight["messages"])
            at = rng.randrange(len(messages))
            messages[at] = {**messages[at], "text": f"this side only at {step}"}
        new: dict[str, Any] = {**doc, "createdAt": f"t{step}", "inFlight": [in_flight]}
        if rng.random() < 0.1:  # the task ends: its result is made from the conversation
            result = {"messages": copy.deepcopy(conversation[1:]), "output": "done"}
            new = {**new, "completed": [*doc["completed"], result], "inFlight": []}
            conversation = []
        documents.append(new)
        doc = new
    return documents


@pytest.mark.parametrize("seed", range(40))
def test_random_conversations_round_trip(seed: int) -> None:
    _check_chain(_conversations(seed))


@pytest.mark.parametrize(
    "writes",
    [
        [["s", ["b", 0, "text"], "changed"]],  # into the copy
        [["s", ["a", 0, "text"], "changed"]],  # into the source
        [["x", ["a", 1, "parts"], [3]]],  # a list in the source, extended
        [["t", ["b", 1, "parts"], 0]],  # a list in the copy, cut
        [["d", ["b", 0, "text"]]],
        [["c", ["b", 1, "parts"], ["a", 1, "parts"], 0, 2], ["s", ["a", 1, "parts", 0], 9]],
    ],
)
def test_a_write_into_a_shared_item_changes_only_the_side_it_names(writes: list[Any]) -> None:
    """Copying on write: what a range copy shares is copied where a later record writes into
    it, so the other side keeps what it held (the deep copy's result, exactly)."""
    base = {"a": [{"text": "m0"}, {"parts": [1, 2]}], "b": []}
    copy_op = ["o", ["b"], ["a"], 0, 2]
    deep = orjson.loads(orjson.dumps(base))
    apply(deep, [copy_op])
    apply(deep, orjson.loads(orjson.dumps(writes)))
    shared_doc, shared = orjson.loads(orjson.dumps(base)), set[int]()
    apply(shared_doc, [copy_op], shared)  # one record
    apply(shared_doc, orjson.loads(orjson.dumps(writes)), shared)  # a later one
    assert orjson.dumps(shared_doc) == orjson.dumps(deep)
    assert shared_doc["a"] != shared_doc["b"]


def test_a_copy_made_from_before_the_delta_keeps_what_the_delta_then_changes() -> None:
    """``o`` reads the document as it was: a write into a source item later in the same delta
    does not reach the copy."""
    ops: list[list[Any]] = [["o", ["b"], ["a"], 0, 1], ["s", ["a", 0, "text"], "after"]]
    doc: dict[str, Any] = {"a": [{"text": "before"}], "b": []}
    shared = set[int]()
    apply(doc, ops, shared)
    assert doc == {"a": [{"text": "after"}], "b": [{"text": "before"}]}


def test_a_list_marked_as_grown_from_the_old_one_costs_only_its_new_items() -> None:
    conversation = [_message(n) for n in range(20)]
    old_list = AppendedList(conversation)
    grown = AppendedList([*conversation, _message(20)], old_list)
    assert grown.extends(old_list)
    ops = _round_trip({"conv": old_list}, {"conv": grown})
    assert ops == [["x", ["conv"], [_message(20)]]]


def test_a_grown_mark_naming_another_list_is_not_trusted() -> None:
    """The mark is honoured only for the very list the old document holds: a list that names
    another one (or one no longer alive) is compared item by item, so a changed item shows."""
    conversation = [_message(n) for n in range(5)]
    elsewhere = AppendedList(conversation)
    old_list = list(conversation)
    changed = AppendedList([_message(0), *conversation[1:], _message(5)], elsewhere)
    changed[0] = {"role": "user", "content": [{"type": "text", "text": "rewritten"}]}
    assert not changed.extends(old_list)
    ops = _round_trip({"conv": old_list}, {"conv": changed})
    assert b"rewritten" in orjson.dumps(ops)


def test_a_grown_list_does_not_keep_the_list_it_grew_from_alive() -> None:
    previous = AppendedList([_message(0)])
    held = weakref.ref(previous)
    grown = AppendedList([*previous, _message(1)], previous)
    del previous
    assert held() is None  # no chain of every list a long run handed out
    assert len(grown) == 2


def test_a_runner_state_marks_each_boundary_s_lists_as_grown_from_the_last() -> None:
    state = RunnerState(conversation=[_said("go")])
    first = state.to_checkpoint("t", "w").conversation_messages
    state.conversation.append(_said("more"))
    second = state.to_checkpoint("t", "w").conversation_messages
    assert isinstance(second, AppendedList) and second.extends(first)
    assert isinstance(first, list) and len(first) == 1  # a copy: the cache grows on
    state.conversation[:] = [_said("another conversation")]
    third = state.to_checkpoint("t", "w").conversation_messages
    assert isinstance(third, AppendedList) and not third.extends(second)
