"""ApprovalDecision resources for pending requests (pure: manifests and summaries)."""

from __future__ import annotations

import json
from typing import Any

from oma.approval.models import ApprovalRequest
from oma_operator.models import GROUP, VERSION

LABEL_TEAMRUN, LABEL_REQUEST = "oma.dev/teamrun", "oma.dev/request-id"
SUMMARY_LIMIT = 16384


def decision_name(teamrun: str, request_id: str) -> str:
    """Deterministic per request: a restarted operator finds what it created before."""
    return f"{teamrun[:230]}-{request_id.removeprefix('apr_')[:16]}"


def summary(request: ApprovalRequest) -> str:
    """What the reviewer decides on, in words; the hash binds the exact JSON content."""
    content = request.content
    lines: list[str] = []
    if request.scope == "uncertain_tool_call":
        lines.append(
            f"Uncertain tool call {content.get('toolName')} by agent {content.get('agentName')} "
            f"in task {content.get('taskId')} (call {content.get('toolCallId')}): it started at "
            f"{content.get('startedAt')} in attempt {content.get('startedAttempt')} and the run "
            "stopped before its result was saved, so it may or may not have happened."
        )
        lines.append("Input: " + _json(content.get("input")))
        lines.append(
            "Check its effect, then set decision Approved to run it again, or Rejected with "
            "resolution Done (and result: what it did) to record it as done, or Rejected "
            "(resolution Failed) to record it as not done."
        )
    elif request.scope == "tool_call":
        lines.append(
            f"Tool call {content.get('toolName')} by agent {content.get('agentName')} "
            f"in task {content.get('taskId')} (call {content.get('toolCallId')})."
        )
        lines.append("Input: " + _json(content.get("input")))
        if content.get("rawInput") != content.get("input"):
            lines.append("Model's raw input: " + _json(content.get("rawInput")))
        if content.get("consequential"):
            lines.append("The tool is marked consequential.")
    elif request.scope == "task_dispatch":
        task = content.get("task") or {}
        lines.append(
            f"Start task {task.get('title')!r} ({task.get('id')}) "
            f"assigned to {task.get('assignee')}."
        )
        lines.append(f"Description: {task.get('description')}")
    elif request.scope == "task_round":
        done = [t.get("title") for t in content.get("completedTasks") or []]
        upcoming = [t.get("title") for t in content.get("nextTasks") or []]
        lines.append(f"After {done}, start the next round: {upcoming}.")
    else:
        tasks = content.get("tasks") or []
        lines.append(f"Plan of {len(tasks)} task(s) ({content.get('continuation')}):")
        lines.extend(
            f"- {t.get('title')} -> {t.get('assignee')}: {t.get('description')}" for t in tasks
        )
    if request.reason:
        lines.append(f"Reason: {request.reason}")
    lines.append(f"Content hash: {request.request_hash}")
    text = "\n".join(lines)
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def decision_manifest(teamrun: dict[str, Any], request: ApprovalRequest) -> dict[str, Any]:
    meta = teamrun["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ApprovalDecision",
        "metadata": {
            "name": decision_name(meta["name"], request.id),
            "namespace": meta["namespace"],
            "labels": {LABEL_TEAMRUN: meta["name"], LABEL_REQUEST: request.id},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "TeamRun",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "teamRun": meta["name"],
            "requestId": request.id,
            "requestHash": request.request_hash,
            "scope": request.scope,
            "summary": summary(request),
            "decision": "Pending",
        },
    }


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
