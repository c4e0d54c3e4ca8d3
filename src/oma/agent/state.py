"""A runner's durable state, convertible to and from the checkpoint's in-flight record."""

from __future__ import annotations

from dataclasses import dataclass, field

from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.checkpoint.runner_state import (
    InFlightTask,
    PendingToolCall,
    RunnerPhase,
    ToolCallCommit,
    ToolCallRecord,
    ToolCallStart,
)
from oma.checkpoint.runner_state import TokenUsage as CheckpointUsage
from oma.checkpoint.runner_state import ToolUseBlock as CheckpointToolUse
from oma.llm.types import LLMMessage, TokenUsage, ToolUseBlock


@dataclass
class PendingCall:
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
class RunnerState:
    conversation: list[LLMMessage]
    messages: list[LLMMessage] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    records: list[ToolCallRecord] = field(default_factory=list)
    turns: int = 0
    phase: RunnerPhase = "awaiting_model"
    pending: list[PendingCall] = field(default_factory=list)
    final_output: str | None = None

    def to_checkpoint(self, task_id: str, assignee: str) -> InFlightTask:
        executing = self.phase == "executing_tools"
        return InFlightTask(
            task_id=task_id,
            assignee=assignee,
            phase=self.phase,
            conversation_messages=[m.to_wire() for m in self.conversation],
            messages=[m.to_wire() for m in self.messages],
            token_usage=CheckpointUsage(
                input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens
            ),
            tool_calls=list(self.records),
            turns=self.turns,
            pending_tool_calls=[
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
            else None,
            final_output=self.final_output if self.phase == "completed" else None,
        )

    @classmethod
    def from_checkpoint(cls, saved: InFlightTask) -> RunnerState:
        return cls(
            conversation=[LLMMessage.model_validate(m) for m in saved.conversation_messages],
            messages=[LLMMessage.model_validate(m) for m in saved.messages],
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
        )
