"""A runner's durable state, convertible to and from the checkpoint's in-flight record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.checkpoint.delta_diff import AppendedList
from oma.checkpoint.runner_state import (
    InFlightTask,
    PendingToolCall,
    RunnerPhase,
    ToolCallCommit,
    ToolCallRecord,
    ToolCallStart,
    remember_wire,
)
from oma.checkpoint.runner_state import TokenUsage as CheckpointUsage
from oma.checkpoint.runner_state import ToolUseBlock as CheckpointToolUse
from oma.gc_pause import gc_paused
from oma.llm.types import LLMMessage, TokenUsage, ToolUseBlock

# One call for a restored conversation of thousands of messages: per-message calls cost a
# quarter more (issue 45's restore of a 1,000-turn run).
_MESSAGES = TypeAdapter(list[LLMMessage])


@dataclass
class PendingCall:
    """A tool call the model asked for in the current turn: its commit once it ran, the
    approval it waits on or got, and its ``started`` mark (a call that may not run twice)."""

    call: ToolUseBlock
    commit: ToolCallCommit | None = None
    approval_request: ApprovalRequest | None = None
    approval_decision: ApprovalDecisionRecord | None = None
    started: ToolCallStart | None = None

    @property
    def awaiting_decision(self) -> bool:
        return (
            self.commit is None
            and self.approval_request is not None
            and (self.approval_decision is None)
        )


@dataclass
class _WireList:
    """The wires of a list the runner only appends to, extended as it grows: a list that
    shrank or whose first or last known item changed is built again."""

    sources: list[object] = field(default_factory=list)
    wires: list[Any] = field(default_factory=list)
    handed: AppendedList | None = None  # the copy handed out last, while ``wires`` only grew

    def extended(self, items: Sequence[Any], wire: Callable[[Any], Any]) -> AppendedList:
        """A copy of the wires of ``items`` (the cache grows on), marked as the last copy
        extended when nothing but appends happened since."""
        known = len(self.sources)
        if known and (
            len(items) < known
            or items[0] is not self.sources[0]
            or items[known - 1] is not self.sources[-1]
        ):
            self.sources, self.wires, self.handed, known = [], [], None, 0
        for item in items[known:]:
            self.sources.append(item)
            self.wires.append(wire(item))
        self.handed = AppendedList(self.wires, self.handed)
        return self.handed


@dataclass
class RunnerState:
    """One agent's progress on one task: the conversation, the turn's pending tool calls,
    token usage and tool records, what comes next (``phase``); what a checkpoint keeps of an
    in-flight task."""

    conversation: list[LLMMessage]
    messages: list[LLMMessage] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    records: list[ToolCallRecord] = field(default_factory=list)
    turns: int = 0
    phase: RunnerPhase = "awaiting_model"
    pending: list[PendingCall] = field(default_factory=list)
    final_output: str | None = None
    # With a run journal (``oma.agent.journal_hook``): per conversation message, per block,
    # the events that produced it; and the last of the task's events this state reflects.
    lineage: list[list[list[int] | None]] | None = None
    journal_seq: int | None = None
    # The wire of each message and record already persisted, by identity: both are appended,
    # never changed, so each is dumped once, not at every boundary of its conversation.
    _wires: dict[int, tuple[object, dict[str, Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The wire lists of conversation, messages and records as last built, extended as the
    # lists grow, so a boundary's cost does not grow with the conversation.
    _lists: dict[str, _WireList] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def _wire(self, item: LLMMessage | ToolCallRecord) -> dict[str, Any]:
        """A message as the runner always saved it (``to_wire``); a record as the snapshot's
        dump writes it (``to_data``)."""
        cached = self._wires.get(id(item))
        if cached is None or cached[0] is not item:
            cached = (item, item.to_wire() if isinstance(item, LLMMessage) else item.to_data())
            self._wires[id(item)] = cached
        return cached[1]

    def to_checkpoint(self, task_id: str, assignee: str) -> InFlightTask:
        """The in-flight record of this state; its wire is remembered with it (built from the
        wire of each message and record, so a boundary does not dump the conversation again)."""
        executing = self.phase == "executing_tools"
        conversation = self._list("conversation", self.conversation)
        messages = self._list("messages", self.messages)
        records = self._list("records", self.records)
        lineage = None
        if self.lineage is not None:  # each message's entry is a new list, never changed
            lineage = self._lists.setdefault("lineage", _WireList()).extended(self.lineage, _same)
        live = len(conversation) + len(messages) + len(records)
        if len(self._wires) > live:  # drop what is no longer in the state
            kept = {id(item) for items in self._items() for item in items}
            self._wires = {key: value for key, value in self._wires.items() if key in kept}
        pending = (
            [
                PendingToolCall(
                    call=CheckpointToolUse.model_validate(p.call.model_dump(mode="json")),
                    commit=p.commit,
                    started=p.started,
                    approval_request=p.approval_request if p.commit is None else None,
                    approval_decision=p.approval_decision if p.commit is None else None,
                )
                for p in self.pending
            ]
            if executing
            else None
        )
        # Constructed, not validated: validating would copy every message of the conversation
        # at every boundary. Its parts are validated models and the wires of messages made by
        # the engine; the record's own rules are checked here.
        state = InFlightTask.model_construct(
            task_id=task_id,
            assignee=assignee,
            phase=self.phase,
            conversation_messages=conversation,
            messages=messages,
            token_usage=CheckpointUsage(
                input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens
            ),
            tool_calls=list(self.records),
            turns=self.turns,
            pending_tool_calls=pending,
            pending_tool_result_text=None,
            final_output=self.final_output if self.phase == "completed" else None,
            loop_warned=None,
            loop_detected=None,
            budget_exceeded=None,
            journal_seq=self.journal_seq,
            conversation_lineage=lineage,
        )
        state.check_phase_fields()
        wire: dict[str, Any] = {
            "taskId": state.task_id,
            "assignee": state.assignee,
            "phase": state.phase,
            "conversationMessages": conversation,
            "messages": messages,
            "tokenUsage": state.token_usage.to_data(),
            "toolCalls": records,
            "turns": state.turns,
        }
        if state.pending_tool_calls is not None:
            wire["pendingToolCalls"] = [call.to_data() for call in state.pending_tool_calls]
        if state.final_output is not None:
            wire["finalOutput"] = state.final_output
        if lineage is not None:
            wire["conversationLineage"] = lineage
        if self.journal_seq is not None:
            wire["journalSeq"] = self.journal_seq
        remember_wire(state, wire)
        return state

    def _list(
        self, name: str, items: list[LLMMessage] | list[ToolCallRecord]
    ) -> list[dict[str, Any]]:
        cached = self._lists.get(name)
        if cached is None:
            cached = self._lists[name] = _WireList()
        return cached.extended(items, self._wire)

    def _items(self) -> tuple[list[LLMMessage], list[LLMMessage], list[ToolCallRecord]]:
        return self.conversation, self.messages, self.records

    @classmethod
    def from_checkpoint(cls, saved: InFlightTask) -> RunnerState:
        with gc_paused():  # thousands of models at once, none in a cycle
            conversation, messages = _conversation(saved)
        return cls(
            conversation=conversation,
            messages=messages,
            usage=TokenUsage(
                input_tokens=int(saved.token_usage.input_tokens),
                output_tokens=int(saved.token_usage.output_tokens),
            ),
            records=list(saved.tool_calls),
            turns=saved.turns,
            phase=saved.phase,
            pending=[
                PendingCall(
                    call=ToolUseBlock.model_validate(p.call.to_wire()),
                    commit=p.commit,
                    approval_request=p.approval_request,
                    approval_decision=p.approval_decision,
                    started=p.started,
                )
                for p in saved.pending_tool_calls or []
            ],
            final_output=saved.final_output,
            lineage=_copied(saved.conversation_lineage),
            journal_seq=saved.journal_seq,
        )


def _conversation(saved: InFlightTask) -> tuple[list[LLMMessage], list[LLMMessage]]:
    """A saved task's conversation and the runner's ``messages``, validated into models."""
    conversation = _MESSAGES.validate_python(saved.conversation_messages)
    # ``messages`` is usually the conversation's tail (all but the prompt): the same
    # messages, as in a live run, instead of validating each of them twice.
    tail = conversation[len(conversation) - len(saved.messages) :] if saved.messages else []
    if saved.messages and saved.messages == saved.conversation_messages[-len(tail) :]:
        return conversation, tail
    return conversation, _MESSAGES.validate_python(saved.messages)


def _same(item: Any) -> Any:
    return item


def _copied(
    lineage: list[list[list[int] | None]] | None,
) -> list[list[list[int] | None]] | None:
    if lineage is None:
        return None
    return [[list(seqs) if seqs is not None else None for seqs in message] for message in lineage]
