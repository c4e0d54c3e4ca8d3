"""Running one task: prompt, agent runner with checkpoint boundaries, retries, completion."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from oma.agent.journal_hook import RunnerJournal
from oma.agent.result import AgentRunResult, RunStatus, Usage
from oma.agent.runner import AgentRunner, ModelCall, RunnerOutcome
from oma.agent.tool_approvals import ToolApprovalSupport
from oma.approval.errors import DurableApprovalError
from oma.approval.models import ApprovalRequest
from oma.budget.errors import BudgetExceededError, BudgetSuspended
from oma.checkpoint.runner_state import InFlightTask
from oma.errors import ModelUnavailableError, RunDrained
from oma.journal.blocks import JournalLineageError
from oma.llm.adapter import LLMError, LLMResponseError
from oma.orchestrator.budget_guard import step_budget
from oma.orchestrator.context import FatalRunError, RunContext, Stop
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.gating import ENDS_THE_ATTEMPT
from oma.orchestrator.prompts import task_prompt
from oma.orchestrator.saver import save_run
from oma.tasks.task import Task

MAX_RETRY_DELAY_S = 30.0
TOOL_SUSPENDED = "Durable approval required before task execution can continue."


async def run_task(context: RunContext, task: Task) -> None:
    assert task.assignee is not None
    agent = context.team.agent(task.assignee)
    attempts = (task.max_retries or 0) + 1
    resume = context.resume_states.pop(task.id, None)
    if resume is not None:
        context.in_flight[task.id] = resume  # saved by every boundary until the runner's own
    error: Exception | None = None
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            context.in_flight.pop(task.id, None)
            await save_run(context)
            delay = _retry_delay(task, attempt)
            context.emit(
                OrchestratorEvent(
                    "task_retry",
                    task.assignee,
                    task.id,
                    {
                        "attempt": attempt,
                        "maxAttempts": attempts,
                        "error": error,
                        "nextDelayMs": round(delay * 1000),
                    },
                )
            )
            await asyncio.sleep(delay)

        async def boundary(state: InFlightTask, strict: bool) -> None:
            context.in_flight[task.id] = state
            await save_run(context, strict=strict)

        runner = AgentRunner(
            agent,
            run_id=context.identity.run_id,
            task_id=task.id,
            attempt=context.identity.attempt,
            # Without a checkpoint a boundary saves nothing: building its in-flight record (the
            # whole conversation, at every step) would make a long run quadratic for nothing.
            on_boundary=boundary if context.checkpoint is not None else None,
            approvals=_approval_support(context, task),
            guard=context.checkpoint.confirm_current if context.checkpoint else None,
            on_tool=_tool_events(context, task),
            stop_requested=context.drain_requested,
            on_model=_model_events(context, task),
            budget=step_budget(context),
            journal=_runner_journal(context, task),
        )
        try:
            prompt = await task_prompt(context, task) if resume is None or attempt > 1 else ""
            outcome = await runner.run(prompt, resume if attempt == 1 else None)
        except (RunDrained, BudgetSuspended):
            return  # stays in progress; its runner state is in the checkpoint
        except (BudgetExceededError, JournalLineageError) as exc:
            error = exc  # retrying cannot help: the budget, or the conversation, is what it is
            break
        except (FatalRunError, DurableApprovalError):
            raise
        except ENDS_THE_ATTEMPT:
            # Not the task's failure: a strict save (a tool's suspension, the "started" mark
            # before a non-idempotent tool) met a store that failed, or a newer attempt.
            raise
        except Exception as exc:  # a task's failure (model error, bad script) may be retried
            if context.park_on_model_outage and is_outage(exc):
                # The task keeps its place (its last boundary is in the checkpoint): the
                # attempt ends, and the next one resumes it once the provider is back.
                raise ModelUnavailableError(str(exc)) from exc
            error = exc
            continue
        if outcome.suspended:
            _suspended(context, task, outcome)  # not a failure: retries are not consumed
            return
        await _complete(context, task, outcome)
        return
    context.in_flight.pop(task.id, None)
    context.queue.fail(task.id, str(error))
    payload = {"status": "failed", "reason": str(error)}
    context.journal("task/status", payload, task=task.id, agent=task.assignee)
    context.emit(OrchestratorEvent("error", task.assignee, task.id, {"error": error}))


def is_outage(error: Exception) -> bool:
    """A model call that failed transiently after the SDK's retries; not a response the
    engine could not use, nor a request the provider refused as such."""
    return (
        isinstance(error, LLMError) and error.transient and not isinstance(error, LLMResponseError)
    )


def _tool_events(context: RunContext, task: Task) -> Callable[[str, str, bool, float], None]:
    def emit(call_id: str, tool: str, executed: bool, seconds: float) -> None:
        data = {"toolCallId": call_id, "tool": tool, "executed": executed, "seconds": seconds}
        context.emit(OrchestratorEvent("tool_call", task.assignee, task.id, data))

    return emit


def _model_events(context: RunContext, task: Task) -> Callable[[ModelCall], None]:
    def emit(call: ModelCall) -> None:
        data = {
            "provider": call.provider,
            "model": call.model,
            "seconds": call.seconds,
            "inputTokens": call.input_tokens,
            "outputTokens": call.output_tokens,
            "error": call.error,
        }
        context.emit(OrchestratorEvent("model_call", task.assignee, task.id, data))

    return emit


def _runner_journal(context: RunContext, task: Task) -> RunnerJournal | None:
    if context.recorder is None or task.assignee is None:
        return None
    return RunnerJournal(
        context.recorder, task_id=task.id, agent=task.assignee, enforce=context.enforce_lineage
    )


def _approval_support(context: RunContext, task: Task) -> ToolApprovalSupport:
    def pending(request: ApprovalRequest) -> None:
        context.emit(
            OrchestratorEvent("approval_pending", task.assignee, task.id, {"request": request})
        )

    def consumed(request: ApprovalRequest) -> None:
        context.pending_approvals = [r for r in context.pending_approvals if r.id != request.id]

    return ToolApprovalSupport(
        gate=context.gates.on_tool_call if context.gates else None,
        ledger=context.ledger,
        on_pending=pending,
        on_consumed=consumed,
    )


def _suspended(context: RunContext, task: Task, outcome: RunnerOutcome) -> None:
    if context.stop is None:
        context.stop = Stop("suspended", TOOL_SUSPENDED)
    result = _result(context, outcome, RunStatus(code="suspended", message=TOOL_SUSPENDED))
    context.emit(OrchestratorEvent("agent_complete", task.assignee, task.id, {"result": result}))


async def _complete(context: RunContext, task: Task, outcome: RunnerOutcome) -> None:
    assert task.assignee is not None
    result = _result(context, outcome, RunStatus(code="ok"))
    context.results[task.id] = result
    shared = context.team.shared_memory
    if shared is not None:
        key = f"task:{task.id}:result"
        await shared.write(task.assignee, key, outcome.output)
        shared.advance_turn()
        written = {"agent": task.assignee, "key": key, "valueBytes": len(outcome.output.encode())}
        context.journal("memory/set", written, task=task.id, agent=task.assignee)
    context.in_flight.pop(task.id, None)
    context.queue.complete(task.id, outcome.output)
    context.journal("task/status", {"status": "completed"}, task=task.id, agent=task.assignee)
    await save_run(context)
    data = {"result": result, "task": task}
    context.emit(OrchestratorEvent("task_complete", task.assignee, task.id, data))
    context.emit(OrchestratorEvent("agent_complete", task.assignee, task.id, data))


def _result(context: RunContext, outcome: RunnerOutcome, status: RunStatus) -> AgentRunResult:
    state = outcome.state
    return AgentRunResult(
        success=status.code == "ok",
        identity=context.identity,
        status=status,
        output=outcome.output,
        messages=[message.to_wire() for message in state.messages],
        token_usage=Usage(
            input_tokens=state.usage.input_tokens, output_tokens=state.usage.output_tokens
        ),
        tool_calls=list(state.records),
    )


def _retry_delay(task: Task, attempt: int) -> float:
    base = (task.retry_delay_ms if task.retry_delay_ms is not None else 1000) / 1000
    backoff = task.retry_backoff if task.retry_backoff is not None else 2
    delay = min(base * backoff ** (attempt - 2), MAX_RETRY_DELAY_S)
    return random.uniform(delay / 2, delay)
