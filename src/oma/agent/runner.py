"""The built-in agent runner: a model/tool loop that persists at every safe boundary.

Boundaries, in order, within one task:

1. nothing is persisted before the first model response;
2. a response with tool calls is appended to the conversation and persisted *before* any tool
   runs (phase ``executing_tools``, every call pending);
3. the calls run concurrently; each result is persisted on its own as a commit record keyed by
   the model-issued call id, before anything else looks at it;
4. once every call is committed, the results become the next user message (phase
   ``awaiting_model``) and that is persisted;
5. a final text answer is persisted as phase ``completed``.

Restored with a saved state, committed results are replayed verbatim (error results too) and only
uncommitted calls run, with their original call ids; turns and token usage carry on. A call of a
non-idempotent tool is also persisted as started right before it runs; restored started but
uncommitted, it is not re-run but put to a reviewer (``oma.agent.uncertain_calls``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from oma.agent.budget_hook import CostEstimate, StepBudget, may_have_cost
from oma.agent.journal_hook import RunnerJournal
from oma.agent.state import PendingCall, RunnerState
from oma.agent.tool_approvals import BeforeExecute, ToolApprovalSupport, decided_call, live_call
from oma.agent.uncertain_calls import is_uncertain, uncertain_request
from oma.approval.models import ApprovalRequest
from oma.budget.state import BudgetReservation
from oma.checkpoint.runner_state import InFlightTask, ToolCallCommit, ToolCallRecord, ToolCallStart
from oma.checkpoint.runner_state import ToolResultBlock as CommittedResult
from oma.errors import RunDrained
from oma.llm.types import ChatRequest, LLMMessage, TextBlock, ToolResultBlock, ToolSpec
from oma.team import AgentConfig
from oma.timeutil import now_iso
from oma.tools.define import ToolContext, ToolResult

Boundary = Callable[[InFlightTask, bool], Awaitable[None]]  # (state, strict)


@dataclass(frozen=True)
class ModelCall:
    """One call of the agent's model: for metrics and logs (``on_model``)."""

    provider: str  # the adapter's name: anthropic, openai, scripted, ...
    model: str  # as the agent names it ("" when the adapter has its own default)
    seconds: float
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None  # the exception's type when the call failed


@dataclass
class RunnerOutcome:
    """What ``AgentRunner`` ended with: its state, the final output, and the approval
    requests it stopped for (``suspended`` when there are any)."""

    state: RunnerState
    output: str
    pending_requests: list[ApprovalRequest]

    @property
    def suspended(self) -> bool:
        return bool(self.pending_requests)


class AgentRunner:
    """Runs one agent on one task: the model/tool loop, handing its state to ``on_boundary`` at
    every durable boundary; ``run(prompt, resume)`` carries on from a saved state."""

    def __init__(
        self,
        agent: AgentConfig,
        *,
        run_id: str,
        task_id: str,
        attempt: int = 1,
        on_boundary: Boundary | None = None,
        approvals: ToolApprovalSupport | None = None,
        guard: Callable[[], Awaitable[None]] | None = None,
        on_tool: Callable[[str, str, bool, float], None] | None = None,
        stop_requested: Callable[[], bool] | None = None,
        on_model: Callable[[ModelCall], None] | None = None,
        budget: StepBudget | None = None,
        journal: RunnerJournal | None = None,
    ) -> None:
        self.agent = agent
        self.run_id = run_id
        self.task_id = task_id
        self.attempt = attempt
        self._on_boundary = on_boundary
        self._approvals = approvals or ToolApprovalSupport()
        self._guard = guard  # raises when this attempt may no longer run tools (fenced)
        # (tool call id, tool name, executed?, seconds it ran) once per call
        self._on_tool = on_tool
        self._stop_requested = stop_requested  # checked at every durable boundary
        self._on_model = on_model  # once per model call, failed ones too
        self._specs: list[ToolSpec] | None = None
        self._budget = budget
        self._estimate = CostEstimate()
        self._journal = journal  # the run's event journal, when it keeps one

    def _tool_specs(self) -> list[ToolSpec]:
        """The tools' specs (their JSON schemas), made once per task run, not per model turn."""
        if self._specs is None:
            self._specs = [tool.spec for tool in self.agent.tools]
        return list(self._specs)

    async def run(self, prompt: str, resume: InFlightTask | None = None) -> RunnerOutcome:
        if resume is not None:
            state = RunnerState.from_checkpoint(resume)
        else:
            state = RunnerState(
                conversation=[LLMMessage(role="user", content=[TextBlock(text=prompt)])]
            )
        if self._journal is None:
            # A v5 state resumed without a journal: its marks would no longer be kept up.
            state.lineage = state.journal_seq = None
        elif resume is None:
            self._journal.started(state)
        else:
            self._journal.resumed(state)
        while state.phase != "completed":
            if self._stop_requested is not None and self._stop_requested():
                raise RunDrained(f"task {self.task_id} stopped at a durable boundary")
            if state.phase == "executing_tools":
                waiting = await self._run_tools(state)
                if waiting:
                    return self._outcome(state, waiting)
                continue
            if state.turns >= self.agent.max_turns or self._over_budget(state):
                state.final_output = _last_assistant_text(state)
                state.phase = "completed"
                await self._persist(state)
                break
            await self._model_turn(state)
        return self._outcome(state, [])

    def _outcome(self, state: RunnerState, waiting: list[ApprovalRequest]) -> RunnerOutcome:
        return RunnerOutcome(
            state=state,
            output=state.final_output or "",
            pending_requests=waiting,
        )

    async def _model_turn(self, state: RunnerState) -> None:
        request = ChatRequest(
            model=self.agent.model,
            system=self.agent.system_prompt,
            messages=list(state.conversation),
            tools=self._tool_specs(),
            max_tokens=self.agent.max_tokens,
        )
        blocks = self._journal.check(state, request) if self._journal else []
        reservation = await self._reserve(request)
        if reservation is not None:
            assert self._budget is not None
            request.call_key = self._budget.call_key(self.task_id, reservation)
        # Only for a call that is made (the budget may refuse it above).
        request_seq = self._journal.request(state, request, blocks) if self._journal else 0
        started = time.monotonic()
        try:
            response = await self.agent.adapter.chat(request)
        except Exception as exc:
            if self._journal is not None:
                self._journal.turn_ended(state, "error", turn=state.turns + 1)
            self._model_called(started, error=type(exc).__name__)
            if reservation is not None and self._budget is not None:
                self._budget.model_failed(reservation, billed=may_have_cost(exc))
            raise
        usage = response.usage
        self._model_called(started, usage.input_tokens, usage.output_tokens)
        if reservation is not None and self._budget is not None:
            # Before the save below, which then holds the answer and its spend together.
            self._budget.model_answered(reservation, usage if response.usage_reported else None)
        message = response.message
        self._estimate.answered(
            len(state.conversation) + 1, usage, reported=response.usage_reported
        )
        state.conversation.append(message)
        state.messages.append(message)
        state.turns += 1
        state.usage = state.usage + response.usage
        if self._journal is not None:
            self._journal.answered(state, response, message, request_seq)
        calls = message.tool_uses
        if calls:
            state.phase = "executing_tools"
            state.pending = [PendingCall(call=call) for call in calls]
        else:
            state.phase = "completed"
            state.final_output = message.text
            if self._journal is not None:
                self._journal.turn_ended(state, "completed")
        await self._persist(state)

    async def _reserve(self, request: ChatRequest) -> BudgetReservation | None:
        if self._budget is None:
            return None
        estimate = self._estimate.input_tokens(request.system, request.tools, request.messages)
        tokens = estimate + request.max_tokens
        return await self._budget.before_model_call(self.task_id, self.agent.name, tokens)

    def _model_called(
        self,
        started: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
        error: str | None = None,
    ) -> None:
        if self._on_model is None:
            return
        provider = str(
            getattr(self.agent.adapter, "name", None) or type(self.agent.adapter).__name__
        )
        seconds = time.monotonic() - started
        self._on_model(
            ModelCall(provider, self.agent.model, seconds, input_tokens, output_tokens, error)
        )

    async def _run_tools(self, state: RunnerState) -> list[ApprovalRequest]:
        """Run the turn's calls; the requests still awaiting a decision, if any."""
        if self._budget is not None:
            fresh = sum(p.commit is None and not p.awaiting_decision for p in state.pending)
            await self._budget.before_tools(self.task_id, self.agent.name, fresh)
        await _all_or_none(self._run_one(state, pending) for pending in state.pending)
        waiting = [p.approval_request for p in state.pending if p.awaiting_decision]
        if waiting:
            await self._persist(state, strict=True)
            return [request for request in waiting if request is not None]
        results: list[ToolResultBlock] = []
        for pending in state.pending:
            assert pending.commit is not None  # every call above either replayed or committed
            committed = pending.commit.result
            results.append(
                ToolResultBlock(
                    tool_use_id=committed.tool_use_id,
                    content=committed.content,
                    is_error=committed.is_error,
                )
            )
            state.records.append(pending.commit.record)
        message = LLMMessage(role="user", content=list(results))
        state.conversation.append(message)
        state.messages.append(message)
        if self._journal is not None:
            self._journal.results(state, message, [p.call.id for p in state.pending])
        state.pending = []
        state.phase = "awaiting_model"
        await self._persist(state)
        return []

    async def _run_one(self, state: RunnerState, pending: PendingCall) -> None:
        call = pending.call
        if pending.commit is not None:
            if self._on_tool is not None:
                self._on_tool(call.id, call.name, False, 0.0)
            return
        if pending.awaiting_decision:
            return  # still suspended: neither executed nor committed
        try:
            await self._run_fresh(state, pending)
        finally:
            if self._budget is not None and pending.commit is None:
                self._budget.tool_ended(committed=False)  # a commit counted itself

    async def _run_fresh(self, state: RunnerState, pending: PendingCall) -> None:
        """Run (or settle, if uncertain) a call not committed before."""
        call = pending.call
        if self._guard is not None:
            await self._guard()
        started = time.monotonic()
        if is_uncertain(pending):
            await self._ask_about_uncertain(state, pending)
            return
        request, decision = pending.approval_request, pending.approval_decision
        decided = request is not None and decision is not None
        mark = self._start_mark(state, pending, request.id if request and decided else None)
        if request is not None and decision is not None:
            result = await decided_call(
                self.agent.tool(call.name),
                dict(call.input),
                self._context(call.id),
                request,
                decision,
                mark,
            )
        else:
            verdict = await self._execute(call.name, call.input, call.id, mark)
            if isinstance(verdict, ApprovalRequest):
                await self._suspend(state, pending, verdict)
                return
            result = verdict
        await self._commit(state, pending, result, started)

    async def _commit(
        self, state: RunnerState, pending: PendingCall, result: ToolResult, started: float
    ) -> None:
        call, request = pending.call, pending.approval_request
        if self._on_tool is not None:
            self._on_tool(call.id, call.name, True, time.monotonic() - started)
        pending.approval_request = pending.approval_decision = None
        pending.commit = ToolCallCommit(
            result=CommittedResult(
                type="tool_result",
                tool_use_id=call.id,
                content=result.content,
                is_error=result.is_error,
            ),
            record=ToolCallRecord(
                tool_name=call.name,
                input=call.input,
                output=result.summary,
                duration=round((time.monotonic() - started) * 1000),
            ),
        )
        if self._budget is not None:
            self._budget.tool_ended(committed=True)  # counted in the commit's own save
        if self._journal is not None:
            commit = pending.commit
            self._journal.committed(
                state, call.id, commit.result.to_data(), commit.record.to_data()
            )
        await self._persist(state)
        if request is not None and self._approvals.on_consumed is not None:
            self._approvals.on_consumed(request)

    def _start_mark(
        self, state: RunnerState, pending: PendingCall, after_approval: str | None
    ) -> BeforeExecute:
        """For a non-idempotent tool: persist "started" before it runs (strict: no mark, no run)."""
        tool = self.agent.tool(pending.call.name)
        if tool is None or tool.idempotent:
            return None

        async def mark() -> None:
            pending.started = ToolCallStart(
                at=now_iso(), attempt=self.attempt, after_approval=after_approval
            )
            await self._persist(state, strict=True)

        return mark

    async def _ask_about_uncertain(self, state: RunnerState, pending: PendingCall) -> None:
        """Suspend for a reviewer (or, without durable approvals, record an error result)."""
        superseded = pending.approval_request  # a decision whose own run is now uncertain
        if superseded is not None and self._approvals.on_consumed is not None:
            self._approvals.on_consumed(superseded)
        pending.approval_request = pending.approval_decision = None
        context = self._context(pending.call.id)
        verdict = uncertain_request(
            self._approvals, self.agent.tool(pending.call.name), pending, context
        )
        if isinstance(verdict, ApprovalRequest):
            await self._suspend(state, pending, verdict)
            return
        await self._commit(state, pending, verdict, time.monotonic())

    async def _suspend(
        self, state: RunnerState, pending: PendingCall, request: ApprovalRequest
    ) -> None:
        """The request is durable in the checkpoint before its ledger row exists."""
        pending.approval_request = request
        await self._persist(state, strict=True)
        assert self._approvals.ledger is not None  # live_call suspends only with a ledger
        await self._approvals.ledger.ensure_request(request)
        if self._approvals.on_pending is not None:
            self._approvals.on_pending(request)

    def _context(self, call_id: str) -> ToolContext:
        return ToolContext(
            run_id=self.run_id,
            task_id=self.task_id,
            tool_call_id=call_id,
            agent_name=self.agent.name,
            attempt=self.attempt,
        )

    async def _execute(
        self, name: str, raw_input: dict[str, object], call_id: str, mark: BeforeExecute
    ) -> ToolResult | ApprovalRequest:
        tool = self.agent.tool(name)
        if tool is None:
            return ToolResult(
                f'Tool "{name}" is not available to agent "{self.agent.name}".', is_error=True
            )
        return await live_call(self._approvals, tool, dict(raw_input), self._context(call_id), mark)

    def _over_budget(self, state: RunnerState) -> bool:
        budget = self.agent.max_token_budget
        used = state.usage.input_tokens + state.usage.output_tokens
        return budget is not None and used >= budget

    async def _persist(self, state: RunnerState, *, strict: bool = False) -> None:
        if self._on_boundary is not None:
            await self._on_boundary(state.to_checkpoint(self.task_id, self.agent.name), strict)


async def _all_or_none(steps: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run ``steps`` concurrently; when one raises, cancel the others (a sibling call must not
    go on running tools after the attempt ended: fenced, its store gone, its server lost) and
    raise that error itself (not wrapped, as a TaskGroup would)."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # this task was cancelled: so are its calls
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    # A call cancelled by someone else (a tool that raised CancelledError itself) ends the
    # turn as gather would have: it never committed.
    failed = next((t for t in tasks if t.done() and (t.cancelled() or t.exception())), None)
    if failed is None:
        return
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if failed.cancelled():
        raise asyncio.CancelledError()
    error = failed.exception()
    assert error is not None
    raise error


def _last_assistant_text(state: RunnerState) -> str:
    for message in reversed(state.conversation):
        if message.role == "assistant" and message.text:
            return message.text
    return ""
