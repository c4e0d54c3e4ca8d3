"""Folding a run journal's tail into a v5 snapshot's in-flight tasks, as the reference's
``foldJournalTail`` does (its ``docs/checkpoint.md``, "tail replay"): what an attempt did after
its last save (a model reply, a tool result) is taken from the journal instead of done again.

Only in-flight runner state is folded: assistant and user messages appended to a conversation,
the turn counter from ``turn/end``, pending calls from ``tool/call`` and committed results from
``tool/result``. Other events (``task/status``, ``memory/set``, approvals, ``turn/start``,
``llm/request``) are passed over, as are events at or below an entry's mark (``journalSeq``,
else the snapshot's watermark), of another task, or of another agent than the task's assignee.
Anything the fold cannot place discards the whole tail, and the run resumes from the snapshot
alone: numbers not strictly increasing, a result for a call not pending, a text reply (the
task's end is the engine's to record, not the journal's), a call no assistant turn asked for,
tool results with no round open. The reference's exact wording of these reasons is not known;
its tests match the phrases used here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from oma.checkpoint.runner_state import InFlightTask, in_flight_wire


@dataclass(frozen=True)
class TailFold:
    """The entries after the fold (the snapshot's, unchanged, when ``discard_reason`` is set),
    how many events were folded, and why the tail was discarded."""

    tasks: list[InFlightTask]
    folded_events: int
    discard_reason: str | None = None


class _Discard(Exception):
    pass


def tail_read_from(entries: Sequence[InFlightTask], watermark: int) -> int:
    """The first event a fold needs: one past the stalest entry's mark (``journalTailReadFrom``)."""
    marks = [entry.journal_seq if entry.journal_seq is not None else watermark for entry in entries]
    return min(marks, default=watermark) + 1


def fold_journal_tail(
    entries: Sequence[InFlightTask],
    events: Sequence[dict[str, Any]],
    watermark: int,
    *,
    attempt: int | None = None,
) -> TailFold:
    """``entries`` with ``events`` (read from ``tail_read_from``, in order) folded in. With
    ``attempt`` (the one that saved the snapshot), only that attempt's events are folded: a
    later attempt that died before its first save began again from this snapshot, and its
    events (a discarded tail's work done over, the same call ids) are not this state's."""
    wires = [copy.deepcopy(in_flight_wire(entry)) for entry in entries]
    folded = 0
    try:
        _check_order(events)
        own = [e for e in events if attempt is None or e.get("attempt") == attempt]
        for wire in wires:
            folded += _fold_entry(wire, own, watermark)
        tasks = [InFlightTask.model_validate(wire) for wire in wires]
    except _Discard as why:
        return TailFold(list(entries), 0, str(why))
    except ValidationError as exc:
        reason = f"the folded state is not a valid in-flight task ({exc.error_count()} problems)"
        return TailFold(list(entries), 0, reason)
    return TailFold(tasks, folded)


def _check_order(events: Sequence[dict[str, Any]]) -> None:
    previous = 0
    for event in events:
        seq = event.get("seq")
        if not isinstance(seq, int) or seq <= previous:
            raise _Discard(
                f"the journal is not append-only: event {seq!r} follows {previous} (the tail "
                "was rewritten, or two writers appended)"
            )
        previous = seq


def _fold_entry(wire: dict[str, Any], events: Sequence[dict[str, Any]], watermark: int) -> int:
    mark = wire.get("journalSeq")
    mark = watermark if mark is None else mark
    task, assignee = wire["taskId"], wire["assignee"]
    folded = 0
    for event in events:
        if event["seq"] <= mark or event.get("taskId") != task:
            continue
        if event.get("agentName") not in (None, assignee):
            continue  # a delegated agent's own conversation
        if _fold(wire, event):
            folded += 1
            wire["journalSeq"] = event["seq"]
    return folded


def _fold(wire: dict[str, Any], event: dict[str, Any]) -> bool:
    """Fold one event of the entry's; False for one that changes nothing in it."""
    kind = event["type"]
    if kind == "user/message" and event.get("origin") == "tool_results":
        _fold_results(wire, event)
        return True
    if kind == "user/message":
        raise _Discard(
            f"user message {event['seq']} starts the task's conversation over (a retry): it "
            "cannot resume from the saved one"
        )
    fold = _FOLDS.get(kind)
    if fold is None:
        return False
    fold(wire, event)
    return True


def _fold_answer(wire: dict[str, Any], event: dict[str, Any]) -> None:
    seq = event["seq"]
    message = _message(event, "assistant")
    calls = [b for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    if wire["phase"] != "awaiting_model" or not calls:
        raise _Discard(
            f"assistant message {seq} cannot resume from phase {wire['phase']}: only a turn "
            "that asks for tools is folded (a final answer is the engine's to record)"
        )
    _append(wire, message, seq)
    wire["turns"] += 1
    usage = event.get("usage")
    if isinstance(usage, dict):
        tokens = wire["tokenUsage"]
        for name in ("input_tokens", "output_tokens"):
            value = usage.get(name)
            if isinstance(value, int) and value >= 0:
                tokens[name] = tokens.get(name, 0) + value
    # Its calls are pending from here (as the runner saves such a turn), whether or not their
    # tool/call events made it into the journal.
    wire["phase"] = "executing_tools"
    wire["pendingToolCalls"] = [{"call": call} for call in calls]


def _fold_call(wire: dict[str, Any], event: dict[str, Any]) -> None:
    call = event.get("call")
    if not isinstance(call, dict) or not _requested(wire, call.get("id")):
        raise _Discard(f"tool call {event['seq']} has no assistant turn requesting it")
    if _pending(wire, call.get("id")) is None:
        wire["pendingToolCalls"].append({"call": call})


def _fold_result(wire: dict[str, Any], event: dict[str, Any]) -> None:
    pending = _pending(wire, event.get("toolCallId"))
    if pending is None or "commit" in pending:
        raise _Discard(f"tool result {event['seq']} is for a call that is not pending")
    commit: dict[str, Any] = {"result": event.get("result"), "record": event.get("record")}
    if "delegationUsage" in event:
        commit["delegationUsage"] = event["delegationUsage"]
    pending["commit"] = commit
    # As the runner commits: the approval the call waited on, if any, is used up.
    pending.pop("approvalRequest", None)
    pending.pop("approvalDecision", None)


def _fold_results(wire: dict[str, Any], event: dict[str, Any]) -> None:
    calls = wire.get("pendingToolCalls") or []
    if wire["phase"] != "executing_tools" or not calls or any("commit" not in c for c in calls):
        raise _Discard(f"tool results {event['seq']}: no tool round open (every call committed)")
    _append(wire, _message(event, "user"), event["seq"])
    wire["toolCalls"].extend(c["commit"]["record"] for c in calls)
    wire.pop("pendingToolCalls")
    wire["phase"] = "awaiting_model"


def _fold_turn_end(wire: dict[str, Any], event: dict[str, Any]) -> None:
    turn, turns = event.get("turn"), wire["turns"]
    if type(turn) is not int or not turns <= turn <= turns + 1:
        raise _Discard(f"turn end {event['seq']} names turn {turn!r}, after {turns} turns")
    wire["turns"] = turn


_FOLDS: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "assistant/message": _fold_answer,
    "tool/call": _fold_call,
    "tool/result": _fold_result,
    "turn/end": _fold_turn_end,
}


def _message(event: dict[str, Any], role: str) -> dict[str, Any]:
    message = event.get("message")
    if not isinstance(message, dict) or message.get("role") != role:
        raise _Discard(f"event {event['seq']} carries no {role} message")
    if not isinstance(message.get("content"), list):
        raise _Discard(f"event {event['seq']}: its message has no content blocks")
    return message


def _append(wire: dict[str, Any], message: dict[str, Any], seq: int) -> None:
    wire["conversationMessages"].append(message)
    wire["messages"].append(message)
    lineage = wire.get("conversationLineage")
    if lineage is not None:
        lineage.append([[seq] for _ in message["content"]])


def _requested(wire: dict[str, Any], call_id: Any) -> bool:
    if wire["phase"] != "executing_tools" or not wire["conversationMessages"]:
        return False
    last = wire["conversationMessages"][-1]
    return last.get("role") == "assistant" and any(
        isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") == call_id
        for b in last["content"]
    )


def _pending(wire: dict[str, Any], call_id: Any) -> dict[str, Any] | None:
    for pending in wire.get("pendingToolCalls") or []:
        if pending["call"].get("id") == call_id:
            return pending  # type: ignore[no-any-return]
    return None
