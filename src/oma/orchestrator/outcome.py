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
    agent_results: dict[str, AgentRunResult] = {}
    for task in context.queue.tasks:
        result = task_results.get(task.id)
        if result is None or task.assignee is None:
            continue
        previous = agent_results.get(task.assignee)
        agent_results[task.assignee] = _merge(previous, result) if previous else result
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
    )


def undecided_approvals(context: RunContext) -> list[ApprovalRequest]:
    decided = {decision.request_id for decision in context.approval_decisions}
    return [r for r in context.all_pending_approvals() if r.id not in decided]


def _merge(first: AgentRunResult, second: AgentRunResult) -> AgentRunResult:
    return second.model_copy(
        update={
            "success": first.success and second.success,
            "output": f"{first.output}\n\n---\n\n{second.output}",
            "messages": [*first.messages, *second.messages],
            "tool_calls": [*first.tool_calls, *second.tool_calls],
            "token_usage": Usage(
                input_tokens=first.token_usage.input_tokens + second.token_usage.input_tokens,
                output_tokens=first.token_usage.output_tokens + second.token_usage.output_tokens,
            ),
        }
    )
