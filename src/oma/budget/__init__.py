"""Run budgets: limits on a run's tokens, model calls and tool calls that hold across attempts,
retries and crashes (``oma.budget.account``), kept in the run's checkpoint
(``oma.budget.state``)."""

from oma.budget.account import BudgetAccount, Shortfall
from oma.budget.limits import BudgetKind, RunBudget
from oma.budget.state import (
    BudgetLimits,
    BudgetReport,
    BudgetReservation,
    BudgetSpend,
    BudgetState,
)

__all__ = [
    "BudgetAccount",
    "BudgetKind",
    "BudgetLimits",
    "BudgetReport",
    "BudgetReservation",
    "BudgetSpend",
    "BudgetState",
    "RunBudget",
    "Shortfall",
]
