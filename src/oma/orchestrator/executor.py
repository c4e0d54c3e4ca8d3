"""Event-driven execution of the queue: a task starts as soon as its dependencies complete."""

from __future__ import annotations

import asyncio
import random

from oma.agent.result import AgentRunResult, RunStatus, Usage
from oma.agent.runner import AgentRunner, RunnerOutcome
from oma.checkpoint.runner_state import InFlightTask
from oma.orchestrator.context import FatalRunError, RunContext
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.prompts import task_prompt
from oma.tasks.task import Task

MAX_RETRY_DELAY_S = 30.0


async def execute_queue(context: RunContext) -> None:
    running: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for task in context.queue.by_status("pending"):
                if len(running) >= context.max_concurrency:
                    break
                _assign(context, task, running)
                context.queue.start(task.id)
                context.emit(
                    OrchestratorEvent("task_start", task.assignee, task.id, {"task": task})
                )
                context.emit(OrchestratorEvent("agent_start", task.assignee, task.id))
                running[task.id] = asyncio.create_task(run_task(context, task))
            if not running:
                break
            done, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
            for task_id in [tid for tid, job in running.items() if job in done]:
                running.pop(task_id).result()  # a FatalRunError stops the whole run here
    finally:
        for job in running.values():
            job.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
    if all(task.status == "completed" for task in context.queue.tasks):
        await context.save()


def _assign(context: RunContext, task: Task, running: dict[str, asyncio.Task[None]]) -> None:
    roster = context.team.roster
    if task.assignee in roster:
        return
    load = {name: 0 for name in roster}
    for task_id in running:
        assignee = context.queue.get(task_id).assignee
        if assignee in load:
            load[assignee] += 1
    task.assignee = min(roster, key=lambda name: (load[name], roster.index(name)))


async def run_task(context: RunContext, task: Task) -> None:
    assert task.assignee is not None
    agent = context.team.agent(task.assignee)
    attempts = (task.max_retries or 0) + 1
    resume = context.resume_states.pop(task.id, None)
    error: Exception | None = None
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            context.in_flight.pop(task.id, None)
            await context.save()
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

        async def boundary(state: InFlightTask) -> None:
            context.in_flight[task.id] = state
            await context.save()

        runner = AgentRunner(
            agent,
            run_id=context.identity.run_id,
            task_id=task.id,
            attempt=context.identity.attempt,
            on_boundary=boundary,
        )
        try:
            prompt = await task_prompt(context, task) if resume is None or attempt > 1 else ""
            outcome = await runner.run(prompt, resume if attempt == 1 else None)
        except FatalRunError:
            raise
        except Exception as exc:  # a task's failure (model error, bad script) may be retried
            error = exc
            continue
        await _complete(context, task, outcome)
        return
    context.in_flight.pop(task.id, None)
    context.queue.fail(task.id, str(error))
    context.emit(OrchestratorEvent("error", task.assignee, task.id, {"error": error}))


async def _complete(context: RunContext, task: Task, outcome: RunnerOutcome) -> None:
    assert task.assignee is not None
    state = outcome.state
    result = AgentRunResult(
        success=True,
        identity=context.identity,
        status=RunStatus(code="ok"),
        output=outcome.output,
        messages=[message.to_wire() for message in state.messages],
        token_usage=Usage(
            input_tokens=state.usage.input_tokens, output_tokens=state.usage.output_tokens
        ),
        tool_calls=list(state.records),
    )
    context.results[f"{task.assignee}:{task.id}"] = result
    shared = context.team.shared_memory
    if shared is not None:
        await shared.write(task.assignee, f"task:{task.id}:result", outcome.output)
        shared.advance_turn()
    context.in_flight.pop(task.id, None)
    context.queue.complete(task.id, outcome.output)
    await context.save()
    context.emit(
        OrchestratorEvent("task_complete", task.assignee, task.id, {"result": result, "task": task})
    )
    context.emit(OrchestratorEvent("agent_complete", task.assignee, task.id, {"result": result}))


def _retry_delay(task: Task, attempt: int) -> float:
    base = (task.retry_delay_ms if task.retry_delay_ms is not None else 1000) / 1000
    backoff = task.retry_backoff if task.retry_backoff is not None else 2
    delay = min(base * backoff ** (attempt - 2), MAX_RETRY_DELAY_S)
    return random.uniform(delay / 2, delay)
