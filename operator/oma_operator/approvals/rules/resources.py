"""ApprovalDecision resources for pending requests (pure: manifests and summaries).

A resource carries what the reviewer decides on twice: ``summary`` in words (cut, and saying so,
past 16 KiB) and ``content``, the canonical JSON that ``requestHash`` binds, which anyone can
check against the hash (``oma approve`` does, then prints it). The summary shows control, bidi
and invisible characters escaped (``oma.visible``, with a legend line when it did), each value on
its line, and numbers as the content holds them; ``content`` keeps every character it hashes.
"""

from __future__ import annotations

from typing import Any

from oma.approval.canonical import canonical_json, readable_json
from oma.approval.models import ApprovalRequest
from oma.visible import LEGEND, hides_in, visible
from oma_operator.resources.bodies import DecisionBody, TeamRunBody
from oma_operator.resources.models import (
    CONTENT_LIMIT,
    GROUP,
    SUMMARY_LIMIT,
    VERSION,
    ReviewerSet,
)

LABEL_TEAMRUN, LABEL_REQUEST = "oma.dev/teamrun", "oma.dev/request-id"


def decision_name(teamrun: str, request_id: str) -> str:
    """Deterministic per request: a restarted operator finds what it created before."""
    return f"{teamrun[:230]}-{request_id.removeprefix('apr_')[:16]}"


def content_text(request: ApprovalRequest) -> str | None:
    """The content as the canonical JSON its hash binds, or None when it is too large for
    the resource."""
    text = canonical_json(request.content)
    return text if len(text) <= CONTENT_LIMIT else None


def summary(request: ApprovalRequest) -> str:
    """What the reviewer decides on, in words, ending with the content hash. Every line shows
    its values escaped (a newline in a value does not start a line; a legend line before the
    hash says when anything was escaped). Past the limit the words are cut, and a line says so
    and where the whole content is."""
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
        if _differs(content.get("rawInput"), content.get("input")):
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
    elif request.scope == "budget":
        lines.append(
            f"Raise the run's {content.get('limit')} budget from {content.get('current')} to "
            f"{content.get('proposed')}? {content.get('used')} are used or reserved, and the "
            f"next step of task {content.get('taskId')} (agent {content.get('agentName')}) "
            f"needs {content.get('needed')}."
        )
        lines.append("Approve to raise it and continue; Reject to end the run (Rejected).")
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
    escaped = hides_in(content) or hides_in(request.reason)
    text = "\n".join(visible(line) for line in lines)
    return _fit(text, request, escaped)


def _fit(text: str, request: ApprovalRequest, escaped: bool) -> str:
    hash_line = f"Content hash: {request.request_hash}"
    if escaped:  # the legend stays with the hash, past any cut
        hash_line = f"{LEGEND}\n{hash_line}"
    if len(text) + 1 + len(hash_line) <= SUMMARY_LIMIT:
        return f"{text}\n{hash_line}"
    if content_text(request) is not None:
        where = (
            "spec.content holds the whole content: oma approve prints it, checked against the hash"
        )
    else:
        where = (
            "the whole content is too large for this resource: read it with "
            f"oma approvals show {request.id} --store <the run's store URL>"
        )
    note = "\n… [SUMMARY CUT after {kept} of {total} characters; " + where + "]\n"
    longest = note.format(kept=SUMMARY_LIMIT, total=len(text))  # kept has no more digits
    kept = text[: SUMMARY_LIMIT - len(longest) - len(hash_line)]
    return kept + note.format(kept=len(kept), total=len(text)) + hash_line


def decision_manifest(
    teamrun: TeamRunBody,
    request: ApprovalRequest,
    reviewers: ReviewerSet | None = None,
    excluded: list[str] | None = None,
) -> DecisionBody:
    """The resource the operator publishes for ``request``: bound to it by name, owner, ids and
    hash, with the reviewers (and excluded users) the API server checks decisions against."""
    meta = teamrun["metadata"]
    content = content_text(request)
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
            "boundary": request.boundary,
            "summary": summary(request),
            **({"content": content} if content is not None else {}),
            **(
                {"reviewers": reviewers.model_dump(mode="json", exclude_defaults=True)}
                if reviewers is not None
                else {}
            ),
            **({"excludedReviewers": excluded} if excluded else {}),
            "decision": "Pending",
        },
    }


def _json(value: Any) -> str:
    """One line of JSON, numbers as the content holds them (escaped by ``summary``)."""
    return readable_json(value)


def _differs(raw: Any, parsed: Any) -> bool:
    """Whether the model's raw input says something other than the validated input: compared
    as the content holds them (``1000000`` and ``1000000.0`` are one JSON number, ``1`` and
    ``true`` are not)."""
    return canonical_json(raw) != canonical_json(parsed)
