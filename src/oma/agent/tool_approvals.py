"""Approval of tool calls inside the runner: the live gate, suspension, durable decisions.

A live gate answers allow, deny or suspend per call (after input validation). Suspending needs a
checkpointed orchestrated task and a store with compare-and-set; the call is not executed, its
request is saved strictly with the in-flight state, then its ledger row is created. On restore,
a decided call bypasses the live gate: its reviewed content is re-derived from the checkpointed
call and the *current* input model, and must still hash to what was reviewed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from oma.approval.errors import DurableApprovalError
from oma.approval.gates import (
    Allow,
    Deny,
    GateOutcome,
    Suspend,
    ToolCallGate,
    ToolCallGateContext,
    ask_gate,
)
from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import (
    ApprovalDecisionRecord,
    ApprovalRequest,
    ApprovalScope,
    hash_approval_request,
)
from oma.approval.requests import create_approval_request
from oma.tools.define import AnyTool, ToolContext, ToolResult


@dataclass
class ToolApprovalSupport:
    """What the orchestrator lends a runner for gated tool calls."""

    gate: ToolCallGate | None = None
    ledger: DurableApprovalLedger | None = None  # None: the task is not checkpointed
    on_pending: Callable[[ApprovalRequest], None] | None = None
    on_consumed: Callable[[ApprovalRequest], None] | None = None


Verdict = ToolResult | ApprovalRequest
# Called right before a tool's execute (after validation and the gate): where a non-idempotent
# call is durably marked as started.
BeforeExecute = Callable[[], Awaitable[None]] | None


def tool_content(
    tool: AnyTool, ctx: ToolContext, raw: dict[str, Any], parsed: Any
) -> dict[str, Any]:
    return {
        "kind": "tool_call",
        "toolName": tool.name,
        "rawInput": raw,
        "input": parsed.model_dump(mode="json"),
        "agentName": ctx.agent_name,
        "taskId": ctx.task_id,
        "toolCallId": ctx.tool_call_id,
        "consequential": tool.consequential,
    }


async def live_call(
    support: ToolApprovalSupport,
    tool: AnyTool,
    raw: dict[str, Any],
    ctx: ToolContext,
    before_execute: BeforeExecute = None,
) -> Verdict:
    """Validate, ask the gate, and execute, deny, or build a suspension request."""
    try:
        parsed = tool.validate_input(raw)
    except ValidationError as exc:
        return tool.invalid_input_result(exc)
    if support.gate is None:
        return await _execute(tool, parsed, ctx, before_execute)
    gate_ctx = ToolCallGateContext(
        tool_name=tool.name,
        input=parsed.model_dump(mode="json"),
        raw_input=raw,
        agent_name=ctx.agent_name,
        consequential=tool.consequential,
        run_id=ctx.run_id,
        task_id=ctx.task_id,
        tool_call_id=ctx.tool_call_id,
    )
    try:
        outcome: GateOutcome = await ask_gate(support.gate, gate_ctx)
    except Exception as exc:  # a throwing gate denies this call
        return ToolResult(f'Tool "{tool.name}" was denied: approval gate failed: {exc}', True)
    if isinstance(outcome, Allow):
        return await _execute(tool, parsed, ctx, before_execute)
    if isinstance(outcome, Deny):
        why = f": {outcome.reason}" if outcome.reason else "."
        return ToolResult(f'Tool "{tool.name}" was denied by the approval gate{why}', True)
    return tool_suspension(support, tool.name, tool_content(tool, ctx, raw, parsed), ctx, outcome)


async def _execute(
    tool: AnyTool, parsed: Any, ctx: ToolContext, before_execute: BeforeExecute
) -> ToolResult:
    if before_execute is not None:
        await before_execute()
    return await tool.execute_validated(parsed, ctx)


def tool_suspension(
    support: ToolApprovalSupport,
    tool_name: str,
    content: dict[str, Any],
    ctx: ToolContext,
    outcome: Suspend,
    scope: ApprovalScope = "tool_call",
) -> Verdict:
    """A request for ``content`` (a tool call's), or an error result if no durable approval."""
    if ctx.task_id is None:
        return ToolResult(
            f'Tool "{tool_name}" cannot suspend outside an orchestrated checkpointed task.', True
        )
    if support.ledger is None:
        return ToolResult(
            f'Tool "{tool_name}" cannot suspend: durable approval needs checkpoint persistence '
            "and a store with compare_and_set.",
            True,
        )
    support.ledger.assert_atomic_support()  # no CAS: the run fails closed
    return create_approval_request(
        run_id=ctx.run_id,
        scope=scope,
        boundary=f"{ctx.task_id}:{ctx.tool_call_id}",
        content=content,
        reason=outcome.reason,
    )


async def decided_call(
    tool: AnyTool | None,
    raw: dict[str, Any],
    ctx: ToolContext,
    request: ApprovalRequest,
    decision: ApprovalDecisionRecord,
    before_execute: BeforeExecute = None,
) -> ToolResult:
    """Execute an approved call once, or deny a rejected one, if it is still what was reviewed.

    An uncertain call a reviewer recorded as done is not run: its result is the reviewer's
    account of what the call did."""
    name = str(request.content.get("toolName"))
    if tool is None:
        raise DurableApprovalError(
            "APPROVAL_STALE_DECISION",
            f'Reviewed tool "{name}" is no longer granted to agent "{ctx.agent_name}".',
        )
    try:
        parsed = tool.validate_input(raw)
    except ValidationError as exc:
        raise DurableApprovalError(
            "APPROVAL_STALE_DECISION",
            f'The current input model of tool "{name}" rejects the reviewed input: {exc}',
        ) from exc
    content = {**request.content, "input": parsed.model_dump(mode="json")}
    if hash_approval_request(request.scope, request.boundary, content) != request.request_hash:
        raise DurableApprovalError(
            "APPROVAL_STALE_DECISION",
            f'Tool "{name}" would now run with other input than the reviewer approved.',
        )
    if decision.resolution == "done":
        found = f" The reviewer's record: {decision.result}" if decision.result else ""
        return ToolResult(
            f'Tool "{name}" was not run again: it started before the run was interrupted, and '
            f"reviewer {decision.reviewer.id} recorded that it took effect.{found}"
        )
    if decision.resolution == "failed":
        return ToolResult(
            f'Tool "{name}" may or may not have run before the run was interrupted; reviewer '
            f"{decision.reviewer.id} recorded it as failed and it was not run again. Check its "
            "effect before repeating it.",
            is_error=True,
        )
    if decision.decision != "approved":
        return ToolResult(f'Tool "{name}" denied by durable approval.', is_error=True)
    return await _execute(tool, parsed, ctx, before_execute)
