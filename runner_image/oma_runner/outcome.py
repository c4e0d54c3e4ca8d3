"""Exit codes and the termination message: how a runner reports to the operator.

| exit | meaning |
|---|---|
| 0 | succeeded |
| 10 | suspended: approvals pending |
| 11 | drained after SIGTERM, checkpoint flushed |
| 12 | fenced: a newer attempt owns the run |
| 2 | permanent failure (bad spec, failed or rejected run) |
| 1 | transient failure (store unreachable, model provider down): retried like a crash |
| other | crash |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oma.orchestrator.results import TeamRunResult

EXIT_OK, EXIT_PERMANENT, EXIT_SUSPENDED, EXIT_DRAINED, EXIT_FENCED = 0, 2, 10, 11, 12
EXIT_TRANSIENT = 1
MAX_MESSAGE_BYTES = 4096  # what Kubernetes keeps of a termination message
EXIT_BY_STATUS = {"ok": EXIT_OK, "suspended": EXIT_SUSPENDED, "cancelled": EXIT_DRAINED}


def exit_code_for(result: TeamRunResult) -> int:
    return EXIT_BY_STATUS.get(result.status.code, EXIT_PERMANENT)


def message_for(result: TeamRunResult, *, pod_attempt: int) -> dict[str, Any]:
    tasks = result.tasks
    return {
        "runId": result.identity.run_id,
        "attempt": result.identity.attempt,
        "podAttempt": pod_attempt,
        "status": result.status.code,
        "message": result.status.message or "",
        "tasks": {
            "total": len(tasks),
            "completed": sum(task.status == "completed" for task in tasks),
            "failed": sum(task.status == "failed" for task in tasks),
        },
        "pendingApprovals": [request.id for request in result.pending_approvals],
    }


def write_termination_message(path: Path, message: dict[str, Any]) -> None:
    """Best effort: a runner must exit with its code even if the message cannot be written."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    while len(text.encode()) > MAX_MESSAGE_BYTES and message.get("pendingApprovals"):
        message = {
            **message,
            "pendingApprovals": message["pendingApprovals"][:-1],
            "truncated": True,
        }
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text[:MAX_MESSAGE_BYTES], encoding="utf-8")
    except OSError:
        pass
