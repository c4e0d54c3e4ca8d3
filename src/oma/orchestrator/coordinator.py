"""The coordinator of ``run_team``: decomposes a goal into tasks, then synthesizes the answer."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from oma.agent.result import AgentRunResult, RunStatus, Usage
from oma.agent.runner import AgentRunner, RunnerOutcome
from oma.errors import ModelUnavailableError, OmaError
from oma.llm.adapter import LLMError
from oma.orchestrator.budget_guard import step_budget
from oma.orchestrator.context import RunContext
from oma.orchestrator.prompts import decomposition_prompt, synthesis_prompt
from oma.orchestrator.saver import save_run
from oma.orchestrator.task_runner import is_outage
from oma.tasks.loading import TaskSpec
from oma.team import AgentConfig

_SPECS = TypeAdapter(list[TaskSpec])


class CoordinatorError(OmaError):
    code = "COORDINATOR_ERROR"


async def decompose(coordinator: AgentConfig, goal: str, context: RunContext) -> list[TaskSpec]:
    runner = AgentRunner(
        coordinator,
        run_id=context.identity.run_id,
        task_id="coordinator:plan",
        budget=step_budget(context, stops=False),
    )
    outcome = await _parked(context, runner.run(decomposition_prompt(goal, context)))
    return parse_task_list(outcome.output)


async def _parked(context: RunContext, call: Awaitable[RunnerOutcome]) -> RunnerOutcome:
    """The coordinator's answer; a provider outage ends the attempt as a task's model call
    does (``ModelUnavailableError``) where the run parks on outages: planning is done again
    by the next attempt, synthesis after its tasks are restored."""
    try:
        return await call
    except LLMError as exc:
        if context.park_on_model_outage and is_outage(exc):
            raise ModelUnavailableError(str(exc)) from exc
        raise


def parse_task_list(text: str) -> list[TaskSpec]:
    """The JSON array of tasks in the coordinator's answer (prose around it is ignored)."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise CoordinatorError(f"coordinator answer holds no JSON task array: {text[:200]!r}")
    try:
        raw: Any = json.loads(text[start : end + 1])
        specs = _SPECS.validate_python(raw)
    except (ValueError, ValidationError) as exc:
        raise CoordinatorError(f"coordinator task list is invalid: {exc}") from exc
    if not specs:
        raise CoordinatorError("coordinator returned an empty task list")
    return specs


async def synthesize(coordinator: AgentConfig, goal: str, context: RunContext) -> AgentRunResult:
    runner = AgentRunner(
        coordinator,
        run_id=context.identity.run_id,
        task_id="coordinator:synthesis",
        budget=step_budget(context, stops=False),
    )
    outcome = await _parked(context, runner.run(synthesis_prompt(goal, context)))
    if context.budget is not None:
        await save_run(context)  # the synthesis's spend: no boundary of the run follows it
    usage = outcome.state.usage
    return AgentRunResult(
        success=True,
        identity=context.identity,
        status=RunStatus(code="ok"),
        output=outcome.output,
        messages=[m.to_wire() for m in outcome.state.messages],
        token_usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
    )
