"""What a run may spend: tokens, model calls and tool calls, each optional."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BudgetKind = Literal["tokens", "modelCalls", "toolCalls"]
KINDS: tuple[BudgetKind, ...] = ("tokens", "modelCalls", "toolCalls")
# Each kind's attribute on RunBudget, BudgetRaises and BudgetLimits (the spec's camelCase names
# are the kinds).
FIELD: dict[BudgetKind, str] = {
    "tokens": "tokens",
    "modelCalls": "model_calls",
    "toolCalls": "tool_calls",
}


@dataclass(frozen=True)
class RunBudget:
    """A run's limits as its spec sets them (``None``: that kind is not limited). ``tokens``
    counts input and output tokens as the provider reports them, plus what calls lost in a
    crash had reserved."""

    tokens: int | None = None
    model_calls: int | None = None
    tool_calls: int | None = None

    def __post_init__(self) -> None:
        for kind in KINDS:
            value = self.limit(kind)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ValueError(f"budget {kind} must be a whole number of at least 1: {value!r}")
        if all(self.limit(kind) is None for kind in KINDS):
            raise ValueError("a budget needs at least one of tokens, modelCalls, toolCalls")

    def limit(self, kind: BudgetKind) -> int | None:
        value: int | None = getattr(self, FIELD[kind])
        return value
