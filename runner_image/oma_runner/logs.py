"""The runner's log lines (``kubectl logs``): what its attempt does, one line per event.

``plain`` (the default) prints ``oma-runner: <what happened>``; ``json`` prints one JSON object
per line with the time, level, event, message and the run's coordinates (run id, attempt, pod,
namespace, TeamRun), for log collectors. Tasks starting, finishing, failing and retried, model
calls (time, tokens), tool calls (executed, or replayed from a commit), checkpoint saves,
approvals asked for, warnings and errors are logged as the engine reports them (its progress
events).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

from oma.orchestrator.events import OrchestratorEvent
from oma.pod_contract import LOG_FORMATS
from oma.timeutil import now_iso


class RunnerLog:
    def __init__(
        self, log_format: str, coordinates: Mapping[str, Any], out: TextIO | None = None
    ) -> None:
        if log_format not in LOG_FORMATS:
            raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
        self.json = log_format == "json"
        self.coordinates = {k: v for k, v in coordinates.items() if v is not None}
        self.out = out

    def line(self, level: str, event: str, message: str, **fields: Any) -> None:
        out = self.out or (sys.stderr if level in ("warning", "error") else sys.stdout)
        if not self.json:
            out.write(f"oma-runner: {message}\n")
        else:
            record = {"time": now_iso(), "level": level, "event": event, "message": message}
            record |= self.coordinates
            record |= {k: v for k, v in fields.items() if v is not None}
            out.write(orjson.dumps(record, default=str).decode() + "\n")
        out.flush()

    def on_progress(self, event: OrchestratorEvent) -> None:
        described = describe(event)
        if described is not None:
            level, message, fields = described
            self.line(level, event.type, message, **fields)


def describe(event: OrchestratorEvent) -> tuple[str, str, dict[str, Any]] | None:
    """Level, message and fields of a progress event worth a line (``None``: not logged)."""
    data = event.data
    task = data.get("task")
    title = getattr(task, "title", None) or event.task
    where = {"task": event.task, "agent": event.agent}
    if event.type == "task_start":
        return "info", f"task {title!r} started ({event.agent})", where
    if event.type == "task_complete":
        result = data.get("result")
        calls = len(getattr(result, "tool_calls", []) or [])
        return "info", f"task {title!r} done ({event.agent}, {calls} tool calls)", where
    if event.type == "task_skipped":
        return "info", f"task {title!r} skipped", where
    if event.type == "task_retry":
        error = data.get("error")
        message = f"task {title!r} failed: {error}; try {data.get('attempt')} of "
        return "warning", message + f"{data.get('maxAttempts')}", where | {"error": str(error)}
    if event.type == "tool_call":
        how = "ran" if data.get("executed") else "replayed (committed by an earlier attempt)"
        call, tool = data.get("toolCallId"), data.get("tool")
        fields = where | {"toolCallId": call, "tool": tool, "executed": bool(data.get("executed"))}
        return "info", f"tool call {call} ({tool}) {how}", fields
    if event.type == "model_call":
        provider, model = data.get("provider"), data.get("model") or "default model"
        seconds, error = float(data.get("seconds") or 0.0), data.get("error")
        fields = where | {
            "provider": provider,
            "model": data.get("model"),
            "seconds": seconds,
            "inputTokens": data.get("inputTokens"),
            "outputTokens": data.get("outputTokens"),
            "error": error,
        }
        if error:
            return "warning", f"model call ({provider}, {model}) failed: {error}", fields
        tokens = f"{data.get('inputTokens')} in, {data.get('outputTokens')} out"
        return "info", f"model call ({provider}, {model}): {seconds:.2f} s, {tokens}", fields
    if event.type == "checkpoint_saved":
        seconds = float(data.get("seconds", 0.0))
        return "info", f"checkpoint saved in {seconds * 1000:.1f} ms", {"seconds": seconds}
    if event.type == "approval_pending":
        request = data.get("request")
        request_id, scope = getattr(request, "id", None), getattr(request, "scope", None)
        fields = where | {"requestId": request_id, "scope": scope}
        return "info", f"approval {request_id} ({scope}) asked for", fields
    if event.type == "warning":
        kind = data.get("kind") or "warning"
        return "warning", f"warning: {kind}: {data.get('message')}", {"kind": kind}
    if event.type == "error":
        kind = data.get("kind") or "error"
        message = f"{kind}: {data.get('error')}"
        return "error", message, where | {"kind": kind, "error": str(data.get("error"))}
    return None
