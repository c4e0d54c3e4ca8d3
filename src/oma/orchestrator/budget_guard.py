"""The run's budget at each step of its tasks (``oma.agent.budget_hook.StepBudget``): a model
call's reservation saved strictly before the call, and a step the budget cannot cover turned
into a durable request to raise it (scope ``budget``), on which the run suspends.
"""

from __future__ import annotations

from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma.budget.account import BudgetAccount, Shortfall
from oma.budget.errors import BudgetExceededError, BudgetSuspended
from oma.budget.state import BudgetReservation
from oma.llm.types import TokenUsage
from oma.orchestrator.context import RunContext, Stop
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.gating import persist_pending_approval
from oma.orchestrator.saver import save_run

BUDGET_SUSPENDED = "Budget raise approval pending."


def budget_request(
    run_id: str, shortfall: Shortfall, task_id: str, agent_name: str
) -> ApprovalRequest:
    """ "Raise the budget to N?": one request per limit and level (its boundary)."""
    return create_approval_request(
        run_id=run_id,
        scope="budget",
        boundary=f"budget:{shortfall.kind}:{shortfall.limit}",
        content={
            "kind": "budget",
            "limit": shortfall.kind,
            "current": shortfall.limit,
            "proposed": shortfall.proposed,
            "used": shortfall.used,
            "needed": shortfall.needed,
            "taskId": task_id,
            "agentName": agent_name,
        },
    )


def shortfall_text(shortfall: Shortfall) -> str:
    return (
        f"the run's {shortfall.kind} budget of {shortfall.limit} cannot cover the next step "
        f"({shortfall.used} used or reserved, {shortfall.needed} needed)"
    )


class BudgetGuard:
    """``stops=False`` (the coordinator's planning and synthesis): its calls are reserved and
    counted, but never stop for the budget. While the coordinator plans, its reservations are
    not saved (a checkpoint with no tasks yet would be taken by a restore for a run with nothing
    left to do): the plan's spend is saved with the run's first boundary."""

    def __init__(self, context: RunContext, account: BudgetAccount, *, stops: bool = True) -> None:
        self.context = context
        self.account = account
        self.stops = stops

    async def before_model_call(
        self, task_id: str, agent_name: str, tokens: int
    ) -> BudgetReservation:
        shortfall = self.account.model_call_shortfall(tokens)
        if shortfall is not None and self.stops:
            await self._stop(task_id, agent_name, shortfall)
        reservation = self.account.reserve(task_id, tokens, self.context.identity.attempt)
        if not self.stops and not self.context.queue.tasks:
            return reservation  # planning
        try:
            # Durable before the call is sent: a crash during it cannot make it uncounted.
            await save_run(self.context, strict=True)
        except BaseException:
            self.account.release(reservation)
            raise
        return reservation

    def model_answered(self, reservation: BudgetReservation, usage: TokenUsage | None) -> None:
        if usage is None:
            self.account.settle_unreported(reservation)
        else:
            self.account.settle(reservation, usage.input_tokens, usage.output_tokens)
        self._spent()

    def model_failed(self, reservation: BudgetReservation, *, billed: bool) -> None:
        if billed:
            self.account.lose(reservation)
            self._spent()
        else:
            self.account.release(reservation)

    async def before_tools(self, task_id: str, agent_name: str, calls: int) -> None:
        shortfall = self.account.tool_call_shortfall(calls)
        if shortfall is not None and self.stops:
            await self._stop(task_id, agent_name, shortfall)
        self.account.tools_started(calls)

    def tool_ended(self, *, committed: bool) -> None:
        self.account.tool_ended(committed=committed)
        if committed:
            self._spent()

    def _spent(self) -> None:
        report = self.account.report()
        self.context.emit(OrchestratorEvent("budget", data={"report": report}))

    def call_key(self, task_id: str, reservation: BudgetReservation) -> str:
        return f"{self.context.identity.run_id}:{task_id}:{reservation.id}"

    async def _stop(self, task_id: str, agent_name: str, shortfall: Shortfall) -> None:
        context = self.context
        ledger = context.ledger
        if ledger is None or context.checkpoint is None or not ledger.atomic:
            raise BudgetExceededError(
                f"Task {task_id} stopped: {shortfall_text(shortfall)}. The run cannot ask for a "
                "raise without a checkpoint in a store with compare_and_set: raise the spec's "
                "budget and run it again."
            )
        request = budget_request(context.identity.run_id, shortfall, task_id, agent_name)
        known = {(r.scope, r.boundary) for r in context.pending_approvals}
        if (request.scope, request.boundary) not in known:  # another task asked already
            await persist_pending_approval(context, request)
        if context.stop is None:
            context.stop = Stop("suspended", BUDGET_SUSPENDED)
        raise BudgetSuspended(f"Task {task_id} waits: {shortfall_text(shortfall)}.")


def step_budget(context: RunContext, *, stops: bool = True) -> BudgetGuard | None:
    if context.budget is None:
        return None
    return BudgetGuard(context, context.budget, stops=stops)
