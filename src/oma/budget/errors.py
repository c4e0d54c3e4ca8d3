"""How a step the budget cannot cover stops its task."""

from __future__ import annotations

from oma.errors import OmaError


class BudgetSuspended(OmaError):
    """A step needs more than the budget has left, and the run asked a reviewer to raise it: the
    task stops at its last durable boundary and continues once the raise is approved."""

    code = "BUDGET_SUSPENDED"
    transient = True


class BudgetExceededError(OmaError):
    """A step needs more than the budget has left and the run cannot ask a reviewer (it has no
    durable approvals: no checkpoint in a store with compare_and_set). Raise the spec's budget
    and resume."""

    code = "BUDGET_EXCEEDED"
