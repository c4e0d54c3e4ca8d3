"""A run's budget while it runs: checks before each step, reservations, and the spend.

Before a model call the run reserves what the call may cost (an estimate of its input plus its
``max_tokens``) and saves that reservation strictly; the response settles it with the usage the
provider reported, in the same save as the response itself. A reservation that a crash left
behind is a call whose outcome nobody saw: the next attempt counts it as spent, at what it had
reserved (``lost``), so a run may report more than the provider billed, never less. Tool calls
are counted when their result is committed, once however often a crash made them run.
"""

from __future__ import annotations

from dataclasses import dataclass

from oma.budget.limits import FIELD, KINDS, BudgetKind, RunBudget
from oma.budget.state import LOST_KEPT, BudgetLimits, BudgetReport, BudgetReservation, BudgetState


@dataclass(frozen=True)
class Shortfall:
    """A step the budget cannot cover: ``used`` (spent and reserved) plus ``needed`` would pass
    ``limit``; ``proposed`` is the limit a reviewer is asked to raise it to."""

    kind: BudgetKind
    limit: int
    used: int
    needed: int
    proposed: int


class BudgetAccount:
    """A run's budget while it runs: its limits (``budget`` plus approved raises), what it has
    spent and reserved (``state``, what the checkpoint keeps). Made from a saved state, it
    counts the reservations found there as lost (``recovered``)."""

    def __init__(self, budget: RunBudget, state: BudgetState | None = None) -> None:
        self.budget = budget
        self.state = state.model_copy(deep=True) if state is not None else BudgetState()
        self._tools_running = 0
        self.recovered = self._count_lost()

    def _count_lost(self) -> list[BudgetReservation]:
        """Reservations saved by an earlier attempt that never settled them."""
        lost = self.state.reserved
        for reservation in lost:
            self.lose(reservation)
        return lost

    def lose(self, reservation: BudgetReservation) -> None:
        """A call whose cost nobody knows (its answer lost to a crash, a timeout, a dropped
        connection, or unusable): counted at its reservation, and named."""
        self._drop(reservation)
        spent = self.state.spent
        spent.lost_tokens += reservation.tokens
        spent.lost_model_calls += 1
        spent.model_calls += 1
        self.state.lost = [*self.state.lost, reservation][-LOST_KEPT:]

    def limit(self, kind: BudgetKind) -> int | None:
        base = self.budget.limit(kind)
        return None if base is None else base + _raised(self.state, kind)

    def used(self, kind: BudgetKind) -> int:
        spent, reserved = self.state.spent, self.state.reserved
        if kind == "tokens":
            return spent.tokens + sum(r.tokens for r in reserved)
        if kind == "modelCalls":
            return spent.model_calls + len(reserved)
        return spent.tool_calls + self._tools_running

    def model_call_shortfall(self, tokens: int) -> Shortfall | None:
        return self._shortfall("tokens", tokens) or self._shortfall("modelCalls", 1)

    def tool_call_shortfall(self, calls: int) -> Shortfall | None:
        return self._shortfall("toolCalls", calls)

    def _shortfall(self, kind: BudgetKind, needed: int) -> Shortfall | None:
        limit = self.limit(kind)
        if limit is None or needed <= 0:
            return None
        used = self.used(kind)
        if used + needed <= limit:
            return None
        step = self.budget.limit(kind) or limit
        return Shortfall(kind, limit, used, needed, max(limit + step, used + needed))

    def reserve(self, task_id: str, tokens: int, attempt: int) -> BudgetReservation:
        reservation = BudgetReservation(
            id=f"m{self.state.next_reservation}", task_id=task_id, tokens=tokens, attempt=attempt
        )
        self.state.next_reservation += 1
        self.state.reserved.append(reservation)
        return reservation

    def settle(self, reservation: BudgetReservation, input_tokens: int, output_tokens: int) -> None:
        """The call answered: count what the provider reported instead of the reservation."""
        self._drop(reservation)
        spent = self.state.spent
        spent.input_tokens += max(0, input_tokens)
        spent.output_tokens += max(0, output_tokens)
        spent.model_calls += 1

    def settle_unreported(self, reservation: BudgetReservation) -> None:
        """The call answered without saying what it used: counted at its reservation."""
        self._drop(reservation)
        self.state.spent.unreported_tokens += reservation.tokens
        self.state.spent.model_calls += 1

    def release(self, reservation: BudgetReservation) -> None:
        """The provider refused the call with an error status (nothing generated or billed),
        or it was never sent."""
        self._drop(reservation)

    def _drop(self, reservation: BudgetReservation) -> None:
        self.state.reserved = [r for r in self.state.reserved if r.id != reservation.id]

    def tools_started(self, calls: int) -> None:
        self._tools_running += calls

    def tool_ended(self, *, committed: bool) -> None:
        self._tools_running = max(0, self._tools_running - 1)
        if committed:
            self.state.spent.tool_calls += 1

    def raise_limit(self, kind: BudgetKind, current: int, proposed: int) -> bool:
        """Apply an approved raise from ``current`` to ``proposed``; ``False`` when the limit
        is no longer ``current`` (the spec changed since), and nothing changes."""
        if self.limit(kind) != current or proposed <= current:
            return False
        field = FIELD[kind]
        setattr(self.state.raised, field, _raised(self.state, kind) + proposed - current)
        return True

    def report(self) -> BudgetReport:
        return budget_report(self.budget, self.state)


def budget_report(budget: RunBudget, state: BudgetState | None) -> BudgetReport:
    """Limits and spend as ``state`` has them, its reservations counted as reserved (not lost:
    for a run still running, e.g. as the operator polls it)."""
    state = state if state is not None else BudgetState()
    limits = BudgetLimits(
        **{
            FIELD[kind]: base + _raised(state, kind)
            for kind in KINDS
            if (base := budget.limit(kind)) is not None
        }
    )
    return BudgetReport(
        limits=limits,
        spent=state.spent.model_copy(),
        reserved_tokens=sum(r.tokens for r in state.reserved),
    )


def _raised(state: BudgetState, kind: BudgetKind) -> int:
    value: int = getattr(state.raised, FIELD[kind])
    return value
