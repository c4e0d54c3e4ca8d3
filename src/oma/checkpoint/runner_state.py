"""In-flight state of a built-in LLM runner: conversation, pending tool calls, commit records."""

from __future__ import annotations

import weakref
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SkipValidation, model_validator

from oma.approval.models import TOOL_CALL_SCOPES, ApprovalDecisionRecord, ApprovalRequest
from oma.checkpoint.queue_snapshot import NonNegativeNumber
from oma.wire import WireModel

NonEmpty = Annotated[str, Field(min_length=1)]
RunnerPhase = Literal["awaiting_model", "executing_tools", "completed"]
# Messages are kept as the JSON the model saw; only tool calls and commits are validated.
LLMMessage = dict[str, Any]


def _json_objects(items: Any) -> list[LLMMessage]:
    """A list of JSON objects, kept as it is: the runner validates each message into its model
    at restore, so copying every dict here as well (what ``list[dict[str, Any]]`` validation
    does, a quarter of a long run's load) bought nothing. Keys are not looked at: a parsed
    document's are strings (a Python caller's other keys are written as JSON writes them)."""
    if type(items) is not list:
        raise ValueError("expected a list of messages")
    if not set(map(type, items)) <= {dict}:  # a loop in C: a tenth of a generator's time
        index = next(i for i, item in enumerate(items) if type(item) is not dict)
        raise ValueError(f"message {index} is not a JSON object")
    return items


Messages = Annotated[list[LLMMessage], SkipValidation, AfterValidator(_json_objects)]


class TokenUsage(WireModel):
    """Tokens used so far by a task's runner, or by a delegated call, as a snapshot stores them."""

    input_tokens: NonNegativeNumber = Field(alias="input_tokens")
    output_tokens: NonNegativeNumber = Field(alias="output_tokens")


class ToolUseBlock(WireModel):
    """A model-issued tool call as a snapshot stores it: call id, tool name and input."""

    type: Literal["tool_use"]
    id: NonEmpty
    name: NonEmpty
    input: dict[str, Any]
    signature: str | None = None


class ToolResultBlock(WireModel):
    """``content`` is text or a list of rich parts (text, image, file)."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(alias="tool_use_id")
    content: str | list[dict[str, Any]]
    is_error: bool | None = Field(default=None, alias="is_error")


class ToolCallRecord(WireModel):
    """A tool call that ran: the tool, its input and output, and ``duration`` in milliseconds."""

    tool_name: str
    input: dict[str, Any]
    output: str
    duration: NonNegativeNumber


class ToolCallCommit(WireModel):
    """A tool result made durable on its own, keyed by the model-issued call id."""

    result: ToolResultBlock
    record: ToolCallRecord
    delegation_usage: TokenUsage | None = None


class ToolCallStart(WireModel):
    """Written (durably) just before a non-idempotent tool runs: a restore that finds it on an
    uncommitted call knows the call may have happened. ``after_approval`` names the decision
    that allowed this run, if any. Absent for idempotent tools, so their snapshots are exactly
    the reference's."""

    at: str
    attempt: Annotated[int, Field(ge=1)]
    after_approval: str | None = None


class PendingToolCall(WireModel):
    """A call of the model's last turn while its tools run: the commit once its result is durable,
    the start mark of a non-idempotent tool, and any approval request and decision."""

    call: ToolUseBlock
    commit: ToolCallCommit | None = None
    started: ToolCallStart | None = None
    approval_request: ApprovalRequest | None = None
    approval_decision: ApprovalDecisionRecord | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PendingToolCall:
        call, commit, request = self.call, self.commit, self.approval_request
        if commit is not None:
            if request is not None or self.approval_decision is not None:
                raise ValueError("rule 2.6.4: a committed call carries no approval fields")
            if commit.result.tool_use_id != call.id:
                raise ValueError(
                    f"rule 2.6.4: commit.result.tool_use_id {commit.result.tool_use_id!r} "
                    f"does not match call.id {call.id!r}"
                )
            if commit.record.tool_name != call.name:
                raise ValueError(
                    f"rule 2.6.4: commit.record.toolName {commit.record.tool_name!r} "
                    f"does not match call.name {call.name!r}"
                )
        if self.approval_decision is not None and request is None:
            raise ValueError("rule 2.6.4: approvalDecision without approvalRequest")
        if request is not None:
            content = request.content
            if request.scope not in TOOL_CALL_SCOPES:
                raise ValueError(
                    "rule 2.6.4: a tool call's approvalRequest needs scope tool_call "
                    "(or uncertain_tool_call)"
                )
            if content.get("toolCallId") != call.id or content.get("toolName") != call.name:
                raise ValueError("rule 2.6.4: approvalRequest content does not name this call")
            if self.approval_decision is not None and not self.approval_decision.binds(request):
                raise ValueError("rule 2.6.4: approvalDecision does not bind the approvalRequest")
        return self


class InFlightTask(WireModel):
    """A task's runner state in a snapshot (v3 on): the conversation, phase, usage, turns and tool
    calls, and in phase ``executing_tools`` the calls still pending."""

    task_id: NonEmpty
    assignee: NonEmpty
    phase: RunnerPhase
    conversation_messages: Messages
    messages: Messages
    token_usage: TokenUsage
    tool_calls: list[ToolCallRecord]
    turns: Annotated[int, Field(ge=0)]
    pending_tool_calls: list[PendingToolCall] | None = None
    pending_tool_result_text: str | None = None
    final_output: str | None = None
    loop_warned: bool | None = None
    loop_detected: bool | None = None
    budget_exceeded: bool | None = None
    # Written by journaled runs, the reference's and oma's (checkpoint v5; checked on v3-v5
    # entries as the reference checks them): this task's journal high-water mark, and per
    # message, per block, the journal events that produced it (None: unknown). A run resumed
    # without a journal drops them (its next save is v4), since they would no longer be kept
    # up with the conversation, and a lineage that does not match it is corruption.
    journal_seq: Annotated[int, Field(ge=0)] | None = None
    conversation_lineage: list[list[list[Annotated[int, Field(gt=0)]] | None]] | None = None

    @model_validator(mode="after")
    def _phase_fields(self) -> InFlightTask:
        return self.check_phase_fields()

    @model_validator(mode="before")
    @classmethod
    def _journal_marks_not_null(cls, data: Any) -> Any:
        """The reference allows its journal marks absent, never null."""
        if isinstance(data, dict):
            for key in ("journalSeq", "conversationLineage"):
                if key in data and data[key] is None:
                    raise ValueError(f"rule 2.6.3: {key} is null (leave it out instead)")
        return data

    @model_validator(mode="after")
    def _lineage_fits(self) -> InFlightTask:
        lineage = self.conversation_lineage
        if lineage is not None and len(lineage) != len(self.conversation_messages):
            raise ValueError(
                f"rule 2.6.3: conversationLineage has {len(lineage)} entries for "
                f"{len(self.conversation_messages)} conversation messages (corruption, not an "
                "older schema)"
            )
        return self

    def check_phase_fields(self) -> InFlightTask:
        """Rule 2.6.3 (also for a record made with ``model_construct``); raises ``ValueError``."""
        executing = self.phase == "executing_tools"
        if executing and not self.pending_tool_calls:
            raise ValueError("rule 2.6.3: executing_tools needs non-empty pendingToolCalls")
        if not executing and self.pending_tool_calls is not None:
            raise ValueError(f"rule 2.6.3: pendingToolCalls present in phase {self.phase}")
        if not executing and self.pending_tool_result_text is not None:
            raise ValueError(f"rule 2.6.3: pendingToolResultText present in phase {self.phase}")
        if (self.phase == "completed") != (self.final_output is not None):
            raise ValueError("rule 2.6.3: finalOutput is required in phase completed, else absent")
        return self


# Wire forms of in-flight records made by a runner, which builds them from the wire of each
# message it already has (see ``RunnerState.to_checkpoint``). Kept beside the record, not in
# it: ``model_copy`` would carry a private attribute over to a changed copy. An entry goes with
# its record.
_WIRES: dict[int, tuple[weakref.ref[InFlightTask], dict[str, Any]]] = {}


def remember_wire(state: InFlightTask, wire: dict[str, Any]) -> None:
    """Record ``wire`` as ``state.to_data()``: the caller guarantees they are equal."""
    key = id(state)
    _WIRES[key] = (weakref.ref(state, lambda _: _WIRES.pop(key, None)), wire)


def in_flight_wire(state: InFlightTask) -> dict[str, Any]:
    """``state.to_data()``, without dumping it again when its maker remembered it."""
    known = _WIRES.get(id(state))
    if known is not None and known[0]() is state:
        return known[1]
    return state.to_data()
