"""The plan of a ``run_team``: assignment before review, and the plan gate."""

from __future__ import annotations

from oma.agent.result import RunStatus
from oma.approval.gates import Allow, Deny, ask_gate
from oma.orchestrator.context import RunContext
from oma.orchestrator.gating import persist_pending_approval, plan_request


def assign_unassigned(context: RunContext) -> None:
    """Give every unassigned task to the least-loaded agent, so reviewers see who does what."""
    roster = context.team.roster
    load = {name: 0 for name in roster}
    for task in context.queue.tasks:
        if task.assignee in load:
            load[task.assignee] += 1
    for task in context.queue.tasks:
        if task.assignee not in load:
            task.assignee = min(roster, key=lambda name: (load[name], roster.index(name)))
            load[task.assignee] += 1


async def plan_gate(context: RunContext, plan_only: bool) -> RunStatus | None:
    """``None`` to go on; otherwise the status the run ends with (nothing has run)."""
    gate = context.gates.on_plan_ready if context.gates else None
    if gate is None:
        return None
    try:
        outcome = await ask_gate(gate, context.queue.tasks)
    except Exception as exc:  # a failing plan gate denies the plan
        return RunStatus(code="error", message=f"Plan approval callback failed: {exc}")
    if isinstance(outcome, Allow):
        return None
    if isinstance(outcome, Deny):
        return RunStatus(code="rejected", message="Plan approval rejected.")
    request = plan_request(context.identity.run_id, context.queue.tasks, plan_only, outcome.reason)
    await persist_pending_approval(context, request)
    return RunStatus(code="suspended", message="Plan approval pending.")
