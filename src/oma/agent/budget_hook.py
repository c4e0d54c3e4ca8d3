"""What the agent runner asks of a run's budget before each model call and each turn's tools
(``oma.orchestrator.budget_guard`` answers), and how it estimates a model call's cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from oma import jsonutil
from oma.budget.state import BudgetReservation
from oma.llm.adapter import LLMError, LLMResponseError
from oma.llm.types import LLMMessage, TokenUsage, ToolSpec

BYTES_PER_TOKEN = 3  # generous for text: tokenizers average nearer 4 bytes per token


class StepBudget(Protocol):
    async def before_model_call(
        self, task_id: str, agent_name: str, tokens: int
    ) -> BudgetReservation:
        """Reserve ``tokens`` durably; raises ``BudgetSuspended`` (or ``BudgetExceededError``)
        when the budget cannot cover the call."""
        ...

    def model_answered(self, reservation: BudgetReservation, usage: TokenUsage | None) -> None:
        """Settle with the provider's usage (``None``: it reported none: the reservation)."""
        ...

    def model_failed(self, reservation: BudgetReservation, *, billed: bool) -> None:
        """The call raised: ``billed`` when it may have cost something (counted at its
        reservation), else released."""
        ...

    async def before_tools(self, task_id: str, agent_name: str, calls: int) -> None:
        """Make room for ``calls`` tool calls about to run; raises as ``before_model_call``."""
        ...

    def tool_ended(self, *, committed: bool) -> None: ...

    def call_key(self, task_id: str, reservation: BudgetReservation) -> str: ...


def may_have_cost(error: Exception) -> bool:
    """Whether a model call that raised ``error`` may have been billed: all but a provider's
    refusal with an error status (an answer it could not use was billed; a timeout or a lost
    connection may have been)."""
    refused = isinstance(error, LLMError) and error.status is not None
    return not refused or isinstance(error, LLMResponseError)


def message_bytes(messages: Sequence[LLMMessage]) -> int:
    return sum(len(jsonutil.dumps_bytes(message.to_wire())) for message in messages)


def spec_bytes(tools: Sequence[ToolSpec]) -> int:
    return sum(len(jsonutil.dumps_bytes(tool.model_dump())) for tool in tools)


class CostEstimate:
    """A model call's input tokens, estimated without a tokenizer: the last response's reported
    input and output, plus the bytes added to the conversation since (all of it before the first
    response), at ``BYTES_PER_TOKEN``."""

    def __init__(self) -> None:
        self._base: tuple[int, int] | None = None  # (messages counted, their tokens)
        self._fixed: int | None = None  # system prompt and tool specs, in bytes

    def input_tokens(
        self, system: str | None, tools: Sequence[ToolSpec], conversation: Sequence[LLMMessage]
    ) -> int:
        if self._base is not None and self._base[0] <= len(conversation):
            counted, tokens = self._base
            return tokens + -(-message_bytes(conversation[counted:]) // BYTES_PER_TOKEN)
        if self._fixed is None:
            self._fixed = len((system or "").encode()) + spec_bytes(tools)
        total = self._fixed + message_bytes(conversation)
        return -(-total // BYTES_PER_TOKEN)

    def answered(self, conversation_length: int, usage: TokenUsage, *, reported: bool) -> None:
        """The conversation of ``conversation_length`` messages (the answer included) is, as
        the provider counted, ``input + output`` tokens; a response without usage teaches
        nothing (the estimate goes on from what it knew)."""
        if reported:
            self._base = (conversation_length, usage.input_tokens + usage.output_tokens)
