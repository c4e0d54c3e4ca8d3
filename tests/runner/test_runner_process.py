"""``oma-runner`` as a pod runs it: env in, exit code and termination message out."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.runner.runner_process import runner_env, runner_spec, start_runner, termination_message
from tests.servers.redis_server import RedisServer


def _ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["entry"] for line in path.read_text().splitlines()]


def test_success_exit_0_and_termination_message(tmp_path: Path) -> None:
    env = runner_env(tmp_path, runner_spec({"file": {"path": str(tmp_path / "s.json")}}))
    out, _ = start_runner(env).communicate(timeout=60)
    message = termination_message(tmp_path)
    assert message["status"] == "ok" and message["attempt"] == 1, out
    assert message["tasks"] == {"total": 1, "completed": 1, "failed": 0}
    assert _ledger(tmp_path) == ["first", "second"]


def test_a_run_waiting_for_approval_exits_0_and_says_suspended(tmp_path: Path) -> None:
    """Its pod shows Completed, not Error; the operator reads the report's status."""
    spec = runner_spec({"file": {"path": str(tmp_path / "s.json")}})
    spec["approvals"] = {"tools": ["ledger_append"]}
    runner = start_runner(runner_env(tmp_path, spec))
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    message = termination_message(tmp_path)
    assert message["status"] == "suspended" and len(message["pendingApprovals"]) == 1, message
    assert _ledger(tmp_path) == []  # nothing ran before the decision


def test_a_redacting_store_is_logged_as_unfenced(tmp_path: Path) -> None:
    store = {"file": {"path": str(tmp_path / "s.json")}, "redact": True}
    out, _ = start_runner(runner_env(tmp_path, runner_spec(store))).communicate(timeout=60)
    assert termination_message(tmp_path)["status"] == "ok", out
    assert "oma-runner: warning: fencing_unavailable:" in out


@pytest.mark.timeout(120)
def test_sigterm_drains_exit_11_then_the_next_attempt_resumes(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    store = {"redis": {"urlEnv": "STORE_URL", "namespace": f"runner-{time.time_ns()}"}}
    env = runner_env(tmp_path, runner_spec(store), STORE_URL=redis_server.url)
    first = start_runner(env)
    deadline = time.monotonic() + 60
    while _ledger(tmp_path) != ["first"]:
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)  # while the second model call is in flight
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 11, out
    assert termination_message(tmp_path)["status"] == "cancelled"
    assert _ledger(tmp_path) == ["first"]
    second = start_runner(
        runner_env(tmp_path, runner_spec(store), attempt=2, STORE_URL=redis_server.url)
    )
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    message = termination_message(tmp_path)
    assert (message["status"], message["attempt"], message["podAttempt"]) == ("ok", 2, 2)
    assert _ledger(tmp_path) == ["first", "second"]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("{not json", "invalid run spec"),
        (json.dumps({"agents": []}), "invalid run spec"),
        (json.dumps(runner_spec({"memory": {}})), "needs a durable store"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path: Path, spec: str, problem: str) -> None:
    runner = start_runner(runner_env(tmp_path, spec))
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 2 and problem in out
    assert problem in termination_message(tmp_path)["message"]


def test_a_failed_run_is_permanent(tmp_path: Path) -> None:
    spec = runner_spec({"file": {"path": str(tmp_path / "s.json")}})
    spec["agents"][0]["model"]["script"] = {"# Task: something else": [{"text": "x"}]}
    runner = start_runner(runner_env(tmp_path, spec))
    runner.communicate(timeout=60)
    assert runner.returncode == 2 and termination_message(tmp_path)["status"] == "error"


def test_the_log_says_what_the_attempt_did_line_by_line(tmp_path: Path) -> None:
    """Plain lines (``kubectl logs``): each task's start and end, each tool call, each save."""
    env = runner_env(tmp_path, runner_spec({"file": {"path": str(tmp_path / "s.json")}}))
    out, _ = start_runner(env).communicate(timeout=60)
    lines = [line for line in out.splitlines() if line.startswith("oma-runner: ")]
    assert "oma-runner: task 'Record' started (w)" in lines, out
    assert "oma-runner: tool call r1 (ledger_append) ran" in lines
    model_lines = [line for line in lines if line.startswith("oma-runner: model call (scripted,")]
    assert len(model_lines) == 3 and all(" in, " in line for line in model_lines)
    assert "oma-runner: tool call r2 (ledger_append) ran" in lines
    assert "oma-runner: task 'Record' done (w, 2 tool calls)" in lines
    assert any(line.startswith("oma-runner: checkpoint saved in ") for line in lines)
    assert lines[-1] == "oma-runner: run pod-run attempt 1: ok"


@pytest.mark.timeout(120)
def test_json_lines_carry_the_run_s_coordinates(tmp_path: Path, redis_server: RedisServer) -> None:
    """OMA_LOG_FORMAT=json: one JSON object per line with the run id, attempt, pod, namespace
    and TeamRun, here of a resumed attempt."""
    store = {"redis": {"urlEnv": "STORE_URL", "namespace": f"logs-{time.time_ns()}"}}
    coordinates = {
        "OMA_LOG_FORMAT": "json",
        "OMA_POD_NAME": "pay-a1",
        "OMA_RUN_NAMESPACE": "team-a",
        "OMA_RUN_TEAMRUN": "pay",
    }
    first = start_runner(
        runner_env(tmp_path, runner_spec(store), 1, STORE_URL=redis_server.url, **coordinates)
    )
    deadline = time.monotonic() + 60
    while _ledger(tmp_path) != ["first"]:
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    coordinates["OMA_POD_NAME"] = "pay-a2"
    second = start_runner(
        runner_env(tmp_path, runner_spec(store), 2, STORE_URL=redis_server.url, **coordinates)
    )
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    records = [json.loads(line) for line in out.splitlines()]  # every line is one object
    assert {
        (r["runId"], r["attempt"], r["pod"], r["namespace"], r["teamRun"]) for r in records
    } == {("pod-run", 2, "pay-a2", "team-a", "pay")}
    calls = {r["toolCallId"]: r["executed"] for r in records if r["event"] == "tool_call"}
    assert calls == {"r2": True}  # r1's turn was done by attempt 1
    assert _ledger(tmp_path) == ["first", "second"]
    assert all(r["level"] in ("info", "warning", "error") and r["time"] for r in records)
    assert records[-1]["event"] == "attempt_end" and records[-1]["status"] == "ok"


def test_an_unknown_log_format_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = runner_env(
        tmp_path, runner_spec({"file": {"path": str(tmp_path / "s.json")}}), OMA_LOG_FORMAT="xml"
    )
    runner = start_runner(env)
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 2 and "OMA_LOG_FORMAT='xml': use one of plain, json" in out
    assert _ledger(tmp_path) == []
