"""Run spec validation and ``oma run`` end to end (in-process CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from oma.cli import app
from oma.pod_contract import Exit
from oma.spec import RunSpec
from oma.tools import ToolContext, builtin_tools

REPO = Path(__file__).resolve().parents[2]
AGENT = {"name": "w", "model": {"provider": "scripted", "script": [{"text": "done"}]}}


def _spec(**fields: Any) -> dict[str, Any]:
    return {"agents": [AGENT], "tasks": [{"title": "T", "description": "d"}], **fields}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"mode": "team"}, "mode 'team' needs 'goal'"),
        ({"store": {}}, "exactly one of file, memory, redis, postgres"),
        ({"store": {"memory": {}, "file": {"path": "x"}}}, "exactly one"),
        ({"agents": [{**AGENT, "model": {"provider": "gemini"}}]}, "provider"),
        ({"agents": [{**AGENT, "model": {"provider": "scripted"}}]}, "needs a 'script'"),
        ({"agents": [{**AGENT, "model": {"provider": "openai"}}]}, "needs a 'name'"),
        ({"agents": [AGENT, AGENT]}, "agent names must be unique"),
        ({"tasks": [{"title": "T", "description": "d", "assignee": "nobody"}]}, "unknown agent"),
        ({"goal": "also a goal"}, "does not take 'goal'"),
        ({"colour": "blue"}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_specs_say_what_is_wrong(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        RunSpec.model_validate(_spec(**fields))


def test_the_example_spec_is_valid() -> None:
    import yaml

    spec = RunSpec.model_validate(yaml.safe_load((REPO / "examples/demo.yaml").read_text()))
    assert spec.run_id == "demo" and len(spec.agents) == 2


def test_oma_run_again_of_a_finished_run_says_so_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(_spec(runId="cli-1")))
    runner = CliRunner()
    first = runner.invoke(app, ["run", str(spec)])
    assert first.exit_code == 0, first.output
    assert "cli-1: starting" in first.output and "status ok" in first.output
    assert (tmp_path / ".oma" / "cli-1.json").is_file()
    saved = (tmp_path / ".oma" / "cli-1.json").read_text()
    second = runner.invoke(app, ["run", str(spec)])  # the run is over: nothing to resume
    assert second.exit_code == 0, second.output
    said = " ".join(second.output.split())
    assert said.startswith("oma run cli-1: already complete (attempt 1 completed 1 of 1 tasks)")
    assert "oma checkpoint delete --run-id cli-1" in said and "resuming" not in said
    assert (tmp_path / ".oma" / "cli-1.json").read_text() == saved  # no attempt 2 written


def test_oma_run_reports_a_failed_task_with_exit_1(tmp_path: Path) -> None:
    spec = tmp_path / "run.yaml"
    spec.write_text(
        json.dumps(
            _spec(
                agents=[
                    {
                        **AGENT,
                        "model": {
                            "provider": "scripted",
                            "script": {"# Task: other": [{"text": "x"}]},
                        },
                    }
                ]
            )
        )
    )
    result = CliRunner().invoke(app, ["run", str(spec), "--store", str(tmp_path / "s.json")])
    assert result.exit_code == 2 and "status error" in result.output  # as a runner exits


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read run spec"),
        ("agents: [", "not valid YAML/JSON"),
        ('{"agents": []}', "is invalid: agents"),
    ],
)
def test_oma_run_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    spec = tmp_path / "spec.yaml"
    if content is not None:
        spec.write_text(content)
    result = CliRunner().invoke(app, ["run", str(spec)])
    assert result.exit_code == 2
    assert problem in result.output and result.output.startswith("error:")


def test_oma_run_an_unwritable_events_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(_spec(runId="events")))
    store = tmp_path / "s.json"
    events = tmp_path / "missing" / "events.jsonl"
    result = CliRunner().invoke(
        app, ["run", str(spec), "--store", str(store), "--events", str(events)]
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not an uncaught FileNotFoundError
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: cannot write events file {events}: No such file or directory")
    assert "Traceback" not in result.output
    assert not store.exists()  # refused before the run started


async def test_ledger_tool_applies_each_call_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    tool = builtin_tools()["ledger_append"]
    ctx = ToolContext(run_id="r", task_id="t", tool_call_id="c1", agent_name="a")
    first = await tool.run({"entry": "pay", "amount": 5}, ctx)
    again = await tool.run({"entry": "pay", "amount": 5}, ctx)
    other = await tool.run(
        {"entry": "pay", "amount": 5},
        ToolContext(run_id="r", task_id="t", tool_call_id="c2", agent_name="a"),
    )
    assert first == again and not first.is_error and not other.is_error
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["r:t:c1", "r:t:c2"]


def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    import queue
    import signal
    import subprocess
    import sys
    import threading

    spec = tmp_path / "slow.json"
    spec.write_text(
        json.dumps(
            _spec(
                runId="slow",
                agents=[
                    {
                        **AGENT,
                        "model": {
                            "provider": "scripted",
                            "script": [{"text": "late", "delay": 30}],
                        },
                    }
                ],
            )
        )
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "oma", "run", str(spec)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    stdout, stderr = child.stdout, child.stderr
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:  # (select on the pipe would miss lines already in the reader's buffer)
        for text in iter(stdout.readline, ""):
            lines.put(text)

    reader = threading.Thread(target=read)
    reader.start()

    def line() -> str:
        # Bounded: a child that stalls fails the test with what it said, not the test's timeout.
        try:
            return lines.get(timeout=60)
        except queue.Empty:
            child.kill()
            child.wait()
            pytest.fail(f"oma run printed no line in 60 s; stderr {stderr.read()!r}")

    assert "starting" in line()
    started = line()  # "▶ T → w": the task began, its 30 s model call next
    assert started.split()[1:2] == ["T"], started
    child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=25)  # well before the model call's 30 s
    except subprocess.TimeoutExpired:
        child.kill()
    reader.join(timeout=10)
    err = stderr.read()
    out = "".join(lines.queue)
    assert child.returncode == 130, (out, err)
    assert "run the same command again to resume" in err  # stderr: stdout is the run's output
    assert "resume" not in out


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        ({"redis": {}}, "exactly one of 'url' or 'urlEnv'"),
        ({"redis": {"url": "redis://x", "urlEnv": "X"}}, "exactly one of 'url' or 'urlEnv'"),
        ({"postgres": {"dsn": "postgresql://x", "table": "bad table"}}, "table"),
        ({"postgres": {}}, "exactly one of 'dsn' or 'dsnEnv'"),
    ],
)
def test_store_specs_are_validated(store: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        RunSpec.model_validate(_spec(store=store))


def test_a_store_url_from_a_missing_variable_is_a_clear_error(tmp_path: Path) -> None:
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(_spec(store={"redis": {"urlEnv": "OMA_TEST_UNSET_URL"}})))
    result = CliRunner().invoke(app, ["run", str(spec)])
    assert result.exit_code == 2
    assert "read from $OMA_TEST_UNSET_URL, which is not set" in result.output


def test_oma_run_suspends_on_an_approval_then_resumes_once_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    script = [
        {
            "tool_calls": [
                {"id": "p1", "name": "ledger_append", "input": {"entry": "pay", "amount": 9}}
            ]
        },
        {"text": "paid"},
    ]
    spec = tmp_path / "run.json"
    spec.write_text(
        json.dumps(
            {
                "runId": "gated",
                "approvals": {"tools": ["ledger_append"]},
                "agents": [
                    {
                        "name": "w",
                        "tools": ["ledger_append"],
                        "model": {"provider": "scripted", "script": script},
                    }
                ],
                "tasks": [{"title": "Pay", "description": "Pay."}],
            }
        )
    )
    runner = CliRunner()
    first = runner.invoke(app, ["run", str(spec)])
    assert first.exit_code == 10 and "status suspended" in first.output
    assert not (tmp_path / "ledger.jsonl").exists()
    store = f"file://{tmp_path}/.oma/gated.json"
    listed = runner.invoke(app, ["approvals", "list", "--store", store, "--json"])
    (row,) = json.loads(listed.output)
    request = row["request"]
    assert request["content"]["input"] == {"entry": "pay", "amount": 9.0}
    decided = runner.invoke(
        app,
        [
            "approvals",
            "approve",
            request["id"],
            "--store",
            store,
            "--reviewer",
            "alice",
            "--hash",
            request["requestHash"],
        ],
    )
    assert decided.exit_code == 0, decided.output
    second = runner.invoke(app, ["run", str(spec)])
    assert second.exit_code == 0 and "status ok" in second.output
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["entry"] for line in lines] == ["pay"]


def test_oma_run_shows_that_a_redacting_store_runs_unfenced(tmp_path: Path) -> None:
    spec = tmp_path / "run.yaml"
    store = {"file": {"path": str(tmp_path / "s.json")}, "redact": True}
    spec.write_text(json.dumps(_spec(store=store)))
    result = CliRunner().invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    assert "fencing_unavailable:" in result.output


def test_oma_run_errors_go_to_stderr_with_their_exit_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    missing = subprocess.run(
        [sys.executable, "-m", "oma", "run", str(tmp_path / "absent.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and missing.stdout == ""
    assert "cannot read run spec" in missing.stderr
    spec = tmp_path / "unreachable.json"
    store = {"redis": {"url": "redis://:hunter2@127.0.0.1:1/0", "namespace": "team-a"}}
    spec.write_text(json.dumps(_spec(runId="gone", store=store)))
    unreachable = subprocess.run(
        [sys.executable, "-m", "oma", "run", str(spec)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert unreachable.returncode == Exit.TRANSIENT, unreachable  # transient: run it again
    assert "is unreachable" in unreachable.stderr and "hunter2" not in unreachable.stderr
    assert "error" not in unreachable.stdout
    # The error's code, for scripts (as the runner's termination message has it).
    assert unreachable.stderr.startswith("error: STORE_UNAVAILABLE: "), unreachable.stderr


def test_sigterm_drains_at_a_durable_boundary_and_a_rerun_resumes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    script = [
        {
            "tool_calls": [{"id": "c1", "name": "ledger_append", "input": {"entry": "paid"}}],
            "delay": 1.5,
        },
        {"text": "done"},
    ]
    agent = {
        **AGENT,
        "tools": ["ledger_append"],
        "model": {"provider": "scripted", "script": script},
    }
    spec = tmp_path / "term.json"
    spec.write_text(json.dumps(_spec(runId="term", agents=[agent])))
    env = {**os.environ, "OMA_LEDGER_PATH": str(tmp_path / "ledger.jsonl")}
    command = [sys.executable, "-m", "oma", "run", str(spec)]
    child = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    assert "starting" in child.stdout.readline()
    started = child.stdout.readline()  # "▶ T → w": the task began, its 1.5 s model call next
    assert started.split()[1:2] == ["T"], started
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == Exit.DRAINED, (out, err)
    assert "stopped at a durable boundary after SIGTERM" in err
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again
    assert "resuming" in again.stdout
    ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["entry"] for line in ledger] == ["paid"]
