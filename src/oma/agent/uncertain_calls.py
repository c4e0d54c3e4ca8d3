"""Non-idempotent tool calls that may or may not have happened.

A committed call is replayed; an uncommitted call normally runs again on restore, which is right
for idempotent tools (they deduplicate by ``tool_call_id``). A tool declared
``idempotent=False`` is durably marked as started right before it runs. If a restore finds such
a call started but not committed, the attempt stopped somewhere between "about to run" and
"result saved": the effect may or may not exist. The runner then neither re-runs it nor drops it;
it suspends with an approval request of its own scope, ``uncertain_tool_call`` (the call, when
it started, in which attempt). The reviewer settles it three ways: ``retry`` (approve) runs the
call again (marked again first, so a second crash asks again); ``done`` records it as having
happened, without running it, with the reviewer's ``result`` text as the call's result;
``failed`` (reject) records an error result telling the model the call was not repeated.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from oma.agent.state import PendingCall
from oma.agent.tool_approvals import ToolApprovalSupport, Verdict, tool_content, tool_suspension
from oma.approval.gates import Suspend
from oma.tools.define import AnyTool, ToolContext

UNCERTAIN_REASON = (
    "Uncertain tool call: it started at {at} (attempt {attempt}) and the run stopped before "
    "its result was saved, so it may or may not have happened. Check its effect, then retry "
    "(approve) to run it again, or record it as done (with what it did) or as failed (reject)."
)


def is_uncertain(pending: PendingCall) -> bool:
    """Started and not committed, and not waiting on a decision taken after that start."""
    mark, request = pending.started, pending.approval_request
    if pending.commit is not None or mark is None:
        return False
    # A request made after the start (the uncertainty request itself) is still to be applied;
    # a start made after a decision means that decision's run is what is uncertain now.
    return request is None or mark.after_approval == request.id


def uncertain_request(
    support: ToolApprovalSupport, tool: AnyTool | None, pending: PendingCall, ctx: ToolContext
) -> Verdict:
    mark = pending.started
    assert mark is not None
    raw = dict(pending.call.input)
    content = _content(tool, pending, ctx, raw)
    content |= {"kind": "uncertain_tool_call", "startedAt": mark.at, "startedAttempt": mark.attempt}
    if mark.after_approval is not None:
        content["afterApproval"] = mark.after_approval
    reason = UNCERTAIN_REASON.format(at=mark.at, attempt=mark.attempt)
    return tool_suspension(
        support, pending.call.name, content, ctx, Suspend(reason), "uncertain_tool_call"
    )


def _content(
    tool: AnyTool | None, pending: PendingCall, ctx: ToolContext, raw: dict[str, Any]
) -> dict[str, Any]:
    if tool is not None:
        try:
            return tool_content(tool, ctx, raw, tool.validate_input(raw))
        except ValidationError:
            pass  # the tool's input model changed since: show the input as it was sent
    return {
        "kind": "tool_call",
        "toolName": pending.call.name,
        "rawInput": raw,
        "input": raw,
        "agentName": ctx.agent_name,
        "taskId": ctx.task_id,
        "toolCallId": ctx.tool_call_id,
        "consequential": tool.consequential if tool is not None else True,
    }
