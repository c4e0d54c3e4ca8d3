"""Turning a finished run context into a ``TeamRunResult``."""

from __future__ import annotations

from oma.agent.result import AgentRunResult, RunStatus, Usage
from oma.approval.models import ApprovalRequest
from oma.llm.types import TokenUsage
from oma.orchestrator.context import RunContext
from oma.orchestrator.results import TeamRunResult


def queue_status(context: RunContext) -> RunStatus:
    if context.stop is not None:
        return RunStatus(code=context.stop.code, message=context.stop.message)
    progress = context.queue.progress()
    if progress["failed"]:
        return RunStatus(code="error", message=f"{progress['failed']} task(s) failed.")
    if progress["skipped"]:
        return RunStatus(code="skipped", message=f"{progress['skipped']} task(s) were skipped.")
    if not context.queue.is_complete():
        return RunStatus(code="error", message="Tasks were left unfinished.")
    return RunStatus(code="ok")


def build_result(
    context: RunContext,
    status: RunStatus,
    extra_agent_results: dict[str, AgentRunResult] | None = None,
) -> TeamRunResult:
    task_results: dict[str, AgentRunResult] = {}
    for task in context.queue.tasks:
        result = context.result_for(task.id)
        if result is not None:
            task_results[task.id] = result
    by_agent: dict[str, list[AgentRunResult]] = {}
    for task in context.queue.tasks:
        result = task_results.get(task.id)
        if result is None or task.assignee is None:
            continue
        by_agent.setdefault(task.assignee, []).append(result)
    agent_results = {name: _merge(results) for name, results in by_agent.items()}
    agent_results.update(extra_agent_results or {})
    total = TokenUsage()
    for result in [*task_results.values(), *(extra_agent_results or {}).values()]:
        total = total + TokenUsage(
            input_tokens=result.token_usage.input_tokens,
            output_tokens=result.token_usage.output_tokens,
        )
    return TeamRunResult(
        status=status,
        identity=context.identity,
        tasks=context.queue.tasks,
        task_results=task_results,
        agent_results=agent_results,
        total_token_usage=total,
        goal=context.goal,
        pending_approvals=undecided_approvals(context),
        approval_decisions=list(context.approval_decisions),
        budget=context.budget.report() if context.budget is not None else None,
    )


def undecided_approvals(context: RunContext) -> list[ApprovalRequest]:
    decided = {decision.request_id for decision in context.approval_decisions}
    return [r for r in context.all_pending_approvals() if r.id not in decided]


def _merge(results: list[AgentRunResult]) -> AgentRunResult:
    """One agent's results in task order as one: the last, with every output, message, tool
    call and token joined (in one pass: folding pairwise copied the growing lists each time)."""
    last = results[-1]
    if len(results) == 1:
        return last
    return last.model_copy(
        update={
            "success": all(result.success for result in results),
            "output": "\n\n---\n\n".join(result.output for result in results),
            "messages": [message for result in results for message in result.messages],
            "tool_calls": [call for result in results for call in result.tool_calls],
            "token_usage": Usage(
                input_tokens=sum(result.token_usage.input_tokens for result in results),
                output_tokens=sum(result.token_usage.output_tokens for result in results),
            ),
        }
    )
