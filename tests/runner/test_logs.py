"""The runner's log lines for each kind of engine event (``oma_runner.logs``)."""

from __future__ import annotations

import io
import json

import pytest

from oma.orchestrator.events import OrchestratorEvent
from oma_runner.logs import RunnerLog, describe


def test_a_replayed_call_is_told_apart_from_one_that_ran() -> None:
    replayed = OrchestratorEvent(
        "tool_call", "w", "t1", {"toolCallId": "c1", "tool": "pay", "executed": False}
    )
    ran = OrchestratorEvent(
        "tool_call", "w", "t1", {"toolCallId": "c2", "tool": "pay", "executed": True}
    )
    assert describe(replayed) == (
        "info",
        "tool call c1 (pay) replayed (committed by an earlier attempt)",
        {"task": "t1", "agent": "w", "toolCallId": "c1", "tool": "pay", "executed": False},
    )
    assert describe(ran) is not None and describe(ran)[1] == "tool call c2 (pay) ran"  # type: ignore[index]


def test_failures_are_warnings_and_errors_with_their_message() -> None:
    retry = OrchestratorEvent(
        "task_retry", "w", "t1", {"attempt": 2, "maxAttempts": 3, "error": ValueError("boom")}
    )
    error = OrchestratorEvent(
        "error", "w", "t1", {"kind": "checkpoint_save_failed", "error": OSError("disk")}
    )
    assert describe(retry) == (
        "warning",
        "task 't1' failed: boom; try 2 of 3",
        {"task": "t1", "agent": "w", "error": "boom"},
    )
    level, message, fields = describe(error)  # type: ignore[misc]
    assert (level, message, fields["kind"]) == (
        "error",
        "checkpoint_save_failed: disk",
        "checkpoint_save_failed",
    )
    assert describe(OrchestratorEvent("message", "w", "t1")) is None  # not worth a line


def test_json_lines_hold_the_coordinates_and_no_empty_fields() -> None:
    out = io.StringIO()
    log = RunnerLog("json", {"runId": "r", "attempt": 2, "namespace": None}, out)
    log.on_progress(OrchestratorEvent("checkpoint_saved", data={"seconds": 0.0025}))
    record = json.loads(out.getvalue())
    assert record["event"] == "checkpoint_saved" and record["seconds"] == 0.0025
    assert record["message"] == "checkpoint saved in 2.5 ms"
    assert (record["runId"], record["attempt"]) == ("r", 2) and "namespace" not in record


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="use one of plain, json"):
        RunnerLog("xml", {})


def test_a_model_call_line_has_its_time_and_tokens_or_its_error() -> None:
    ok = OrchestratorEvent(
        "model_call",
        "w",
        "t1",
        {"provider": "anthropic", "model": "claude-x", "seconds": 1.234, "inputTokens": 900,
         "outputTokens": 120, "error": None},
    )  # fmt: skip
    failed = OrchestratorEvent(
        "model_call", "w", "t1", {"provider": "openai", "model": "", "seconds": 0.5,
                                  "inputTokens": 0, "outputTokens": 0, "error": "LLMError"},
    )  # fmt: skip
    level, message, fields = describe(ok)  # type: ignore[misc]
    assert (level, message) == ("info", "model call (anthropic, claude-x): 1.23 s, 900 in, 120 out")
    assert fields["inputTokens"] == 900 and fields["provider"] == "anthropic"
    level, message, _ = describe(failed)  # type: ignore[misc]
    assert (level, message) == ("warning", "model call (openai, default model) failed: LLMError")
