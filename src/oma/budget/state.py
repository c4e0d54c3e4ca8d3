"""A run's budget as its checkpoint keeps it (the snapshot's ``budget``, not in the reference):
what was spent, the reservations of model calls under way, and the raises reviewers approved.

Absent from runs without a budget, so their snapshots stay exactly the reference's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from oma.budget.limits import BudgetKind
from oma.wire import WireModel

Count = Annotated[int, Field(ge=0)]


class BudgetSpend(WireModel):
    """What the run has used across all its attempts. ``lost_tokens`` and ``lost_model_calls``:
    calls whose cost is unknown (a crash hid their outcome, they timed out or lost their
    connection, or the provider's answer was unusable), counted at what they had reserved;
    ``unreported_tokens``: calls answered without usage, counted at their reservation too."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    lost_tokens: Count = 0
    unreported_tokens: Count = 0
    model_calls: Count = 0
    lost_model_calls: Count = 0
    tool_calls: Count = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.lost_tokens + self.unreported_tokens


class BudgetReservation(WireModel):
    """A model call under way: durable before the call is sent, settled by its response."""

    id: Annotated[str, Field(min_length=1)]
    task_id: Annotated[str, Field(min_length=1)]
    tokens: Count
    attempt: Annotated[int, Field(ge=1)]


class BudgetRaises(WireModel):
    """How much reviewers added to each limit of the spec (approved ``budget`` requests)."""

    tokens: Count = 0
    model_calls: Count = 0
    tool_calls: Count = 0


LOST_KEPT = 20  # the lost calls a state names (all are counted in ``spent``)


class BudgetState(WireModel):
    """``lost``: the latest calls a crash hid (at most ``LOST_KEPT``), by reservation id, to
    match with a provider's records by their call keys."""

    spent: BudgetSpend = Field(default_factory=BudgetSpend)
    reserved: list[BudgetReservation] = Field(default_factory=list)
    lost: Annotated[list[BudgetReservation], Field(max_length=LOST_KEPT)] = Field(
        default_factory=list
    )
    raised: BudgetRaises = Field(default_factory=BudgetRaises)
    next_reservation: Annotated[int, Field(ge=1)] = 1


class BudgetLimits(WireModel):
    """A run's limits now: its spec's plus the raises approved (absent: not limited)."""

    tokens: Annotated[int, Field(ge=1)] | None = None
    model_calls: Annotated[int, Field(ge=1)] | None = None
    tool_calls: Annotated[int, Field(ge=1)] | None = None


class BudgetReport(WireModel):
    """A run's budget as a result, a runner's report and a TeamRun's status show it: the limits,
    what was spent, and the tokens reserved by calls under way."""

    limits: BudgetLimits
    spent: BudgetSpend
    reserved_tokens: Count = 0

    @property
    def tokens(self) -> int:
        """Tokens counted against the limit: spent (lost calls included) and reserved."""
        return self.spent.tokens + self.reserved_tokens

    def usage(self) -> list[tuple[BudgetKind, int, int]]:
        """``(kind, used, limit)`` for each limited kind, tokens first, then model and tool
        calls."""
        limits, spent = self.limits, self.spent
        found: list[tuple[BudgetKind, int, int | None]] = [
            ("tokens", self.tokens, limits.tokens),
            ("modelCalls", spent.model_calls, limits.model_calls),
            ("toolCalls", spent.tool_calls, limits.tool_calls),
        ]
        return [(kind, used, limit) for kind, used, limit in found if limit is not None]
