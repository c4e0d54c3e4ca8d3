"""Folding a journal's tail into v5 in-flight tasks: the reference's cases from its
``tests/checkpoint-v5.test.ts`` and ``docs/checkpoint.md`` (the worked "rebuilds a whole round"
example, where the window starts, what is passed over, and each reason a tail is discarded),
ported by hand (its ``tail-replay.ts`` is not readable: the discard reasons match its tests'
patterns, not necessarily its wording)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from oma.checkpoint.runner_state import InFlightTask
from oma.checkpoint.tail_replay import fold_journal_tail, tail_read_from

USER = {"role": "user", "content": [{"type": "text", "text": "Investigate"}]}
USE = {"type": "tool_use", "id": "call-1", "name": "logs", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "call-1", "content": "200 KB of logs"}
RECORD = {"toolName": "logs", "input": {}, "output": "200 KB of logs", "duration": 3}


def _entry(**changes: Any) -> InFlightTask:
    wire: dict[str, Any] = {
        "taskId": "task-1",
        "assignee": "investigator",
        "phase": "awaiting_model",
        "conversationMessages": [USER],
        "messages": [],
        "tokenUsage": {"input_tokens": 1, "output_tokens": 1},
        "toolCalls": [],
        "turns": 1,
        "journalSeq": 100,
        **changes,
    }
    return InFlightTask.model_validate({k: v for k, v in wire.items() if v is not None})


def _event(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    base = {"seq": seq, "timestampUnixMs": seq, "runId": "r", "attempt": 1, "type": kind}
    return {**base, "taskId": "task-1", "agentName": "investigator", **payload}


def _round(start: int = 101) -> list[dict[str, Any]]:
    answer = {"role": "assistant", "content": [USE]}
    results = {"role": "user", "content": [RESULT]}
    usage = {"input_tokens": 2, "output_tokens": 3}
    return [
        _event(start, "assistant/message", message=answer, origin="response", usage=usage),
        _event(start + 5, "tool/call", call=USE),
        _event(start + 6, "tool/result", toolCallId="call-1", result=RESULT, record=RECORD),
        _event(start + 7, "user/message", message=results, origin="tool_results"),
        _event(start + 8, "turn/end", turn=2, outcome="tool_use"),
    ]


def test_the_window_starts_past_the_stalest_entry() -> None:
    assert tail_read_from([_entry(journalSeq=100)], 105) == 101
    assert tail_read_from([_entry(journalSeq=None)], 105) == 106
    two = [_entry(journalSeq=100), _entry(taskId="task-2", journalSeq=90)]
    assert tail_read_from(two, 105) == 91
    assert tail_read_from([], 7) == 8


def test_a_whole_round_is_rebuilt() -> None:
    fold = fold_journal_tail([_entry()], _round(), 105)
    assert fold.discard_reason is None and fold.folded_events == 5
    (task,) = fold.tasks
    assert [m["role"] for m in task.conversation_messages] == ["user", "assistant", "user"]
    assert task.phase == "awaiting_model" and task.pending_tool_calls is None
    assert task.turns == 2 and len(task.tool_calls) == 1
    usage = task.token_usage
    assert (usage.input_tokens, usage.output_tokens) == (3, 4)
    assert task.journal_seq == 109


def test_a_result_before_the_round_closes_is_a_commit_the_resume_replays() -> None:
    fold = fold_journal_tail([_entry()], _round()[:3], 105)
    (task,) = fold.tasks
    assert task.phase == "executing_tools" and task.pending_tool_calls is not None
    commit = task.pending_tool_calls[0].commit
    assert commit is not None and commit.result.content == "200 KB of logs"
    assert task.journal_seq == 107


def test_what_is_not_this_entry_s_is_passed_over() -> None:
    other_task = {**_round()[0], "taskId": "task-2"}
    delegated = {**_round()[0], "agentName": "helper", "seq": 102}
    old = {**_round()[0], "seq": 99}
    status = _event(103, "task/status", status="in_progress")
    memory = _event(104, "memory/set", agent="investigator", key="task:task-1:result")
    events = [old, other_task, delegated, status, memory]
    fold = fold_journal_tail([_entry(journalSeq=98)], sorted(events, key=lambda e: e["seq"]), 105)
    # seq 99 is the entry's own and folds (its call pending); the rest are passed over.
    assert fold.discard_reason is None and fold.folded_events == 1
    calls = fold.tasks[0].pending_tool_calls
    assert calls is not None and [c.call.id for c in calls] == ["call-1"]
    untouched = fold_journal_tail([_entry()], [other_task, delegated, status, memory], 105)
    assert untouched.discard_reason is None and untouched.folded_events == 0
    assert untouched.tasks[0].conversation_messages == _entry().conversation_messages


@pytest.mark.parametrize(
    ("events", "pattern"),
    [
        (lambda r: [r[0], {**r[1], "seq": 100 + 1}], "append-only"),
        (lambda r: [r[0], {**r[2], "toolCallId": "call-9"}], "not pending"),
        (lambda r: [r[0], r[2], {**r[2], "seq": 108}], "not pending"),  # committed twice
        (
            lambda r: [
                _event(
                    101,
                    "assistant/message",
                    message={"role": "assistant", "content": [{"type": "text", "text": "done"}]},
                    origin="response",
                )
            ],
            "cannot resume from",
        ),
        (lambda r: [r[1]], "no assistant turn requesting it"),
        (lambda r: [r[3]], "no tool round open"),
    ],
)
def test_a_tail_the_fold_cannot_place_is_discarded_whole(events: Any, pattern: str) -> None:
    entry = _entry()
    fold = fold_journal_tail([entry], events(_round()), 105)
    assert fold.discard_reason is not None and re.search(pattern, fold.discard_reason)
    assert fold.tasks == [entry] and fold.folded_events == 0


def test_a_folded_lineage_stays_as_long_as_the_conversation() -> None:
    fold = fold_journal_tail([_entry(conversationLineage=[[[1]]])], _round(), 105)
    (task,) = fold.tasks
    assert task.conversation_lineage == [[[1]], [[101]], [[108]]]


def test_only_the_attempt_that_saved_the_snapshot_is_folded() -> None:
    later = [{**e, "attempt": 2} for e in _round()]
    fold = fold_journal_tail([_entry()], later, 105, attempt=1)
    assert fold.discard_reason is None and fold.folded_events == 0
    assert fold_journal_tail([_entry()], later, 105, attempt=2).folded_events == 5


def test_a_task_started_over_or_an_unlikely_turn_discards_the_tail() -> None:
    again = _event(101, "user/message", message=USER, origin="input")
    fold = fold_journal_tail([_entry()], [again], 105)
    assert fold.discard_reason is not None and "starts the task's conversation over" in (
        fold.discard_reason
    )
    for turn in (2**63, 0, "2", True):
        ended = _event(101, "turn/end", turn=turn, outcome="tool_use")
        fold = fold_journal_tail([_entry()], [ended], 105)
        assert fold.discard_reason is not None and "names turn" in fold.discard_reason, turn
