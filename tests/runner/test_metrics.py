"""The runner's series, fed by a real engine run's progress events, served while it runs, and
summed into its termination message (docs/metrics.md lists every series)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from oma_runner.config import RunnerConfig, RunnerConfigError
from oma_runner.metrics import RunnerMetrics
from tests.engine.crashing import CrashingStore, SimulatedCrash, phase_is
from tests.engine.helpers import LabelInput
from tests.runner.runner_process import runner_env, runner_spec, start_runner, termination_message
from tests.servers.process import free_port

TASKS = [{"title": "Pay", "description": "Pay.", "assignee": "worker"}]


def _team() -> Team:
    async def charge(args: LabelInput, ctx: ToolContext) -> str:
        return f"charged:{args.label}"

    calls = {"tool_calls": [{"id": "c1", "name": "charge", "input": {"label": "c1"}}]}
    model = ScriptedAdapter([calls, {"text": "paid"}])
    tool = define_tool("charge", "Charge.", LabelInput, charge)
    return Team(name="t", agents=[AgentConfig(name="worker", adapter=model, tools=[tool])])


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


async def test_saves_failures_and_tool_calls_from_engine_events() -> None:
    store = CrashingStore()
    store.crash_before = phase_is("awaiting_model")  # c1 is committed, then the process "dies"
    first = RunnerMetrics(CollectorRegistry())
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent(on_progress=first.on_progress).run_tasks(
            _team(), TASKS, checkpoint=CheckpointOptions(journal=False, store=store, run_id="m")
        )
    assert first.report()["toolCalls"] == {"executed": 1, "replayed": 0}

    registry = CollectorRegistry()
    second = RunnerMetrics(registry)
    store.fail_next_writes = 1  # one best-effort save fails; the run goes on
    result = await OpenMultiAgent(on_progress=second.on_progress).restore(
        _team(), checkpoint=CheckpointOptions(journal=False, store=store, run_id="m")
    )
    assert result.success
    assert value(registry, "oma_runner_tool_calls_total", source="replayed") == 1
    assert value(registry, "oma_runner_tool_calls_total", source="executed") == 0
    assert value(registry, "oma_runner_checkpoint_save_failures_total") == 1
    saves = value(registry, "oma_runner_checkpoint_save_seconds_count")
    assert saves >= 2 and value(registry, "oma_runner_checkpoint_save_seconds_sum") > 0
    assert value(registry, "oma_runner_checkpoint_save_seconds_bucket", le="+Inf") == saves
    report = second.report()
    assert report["saves"] == saves and report["saveFailures"] == 1
    assert report["toolCalls"] == {"executed": 0, "replayed": 1}


async def test_model_calls_latency_and_tokens_per_provider_and_model() -> None:
    """Every call of an agent's model is counted with its time and tokens, failed ones too (a
    script that runs out fails the call), labelled by provider and model."""
    registry = CollectorRegistry()
    metrics = RunnerMetrics(registry)
    team = _team()
    team.agents[0].model = "claude-test"
    result = await OpenMultiAgent(on_progress=metrics.on_progress).run_tasks(team, TASKS)
    assert result.success
    labels = {"provider": "scripted", "model": "claude-test"}
    assert value(registry, "oma_runner_model_calls_total", **labels, outcome="ok") == 2
    assert value(registry, "oma_runner_model_call_seconds_count", **labels) == 2
    usage = result.total_token_usage
    assert usage.input_tokens > 0
    tokens_in = value(registry, "oma_runner_tokens_total", **labels, direction="input")
    tokens_out = value(registry, "oma_runner_tokens_total", **labels, direction="output")
    assert (tokens_in, tokens_out) == (usage.input_tokens, usage.output_tokens)
    report = metrics.report()
    assert report["modelCalls"] == 2 and report["modelSeconds"] >= 0
    assert report["tokens"] == {"input": usage.input_tokens, "output": usage.output_tokens}

    failing = Team(
        name="f",
        agents=[AgentConfig(name="worker", adapter=ScriptedAdapter([]), model="claude-test")],
    )
    failed = await OpenMultiAgent(on_progress=metrics.on_progress).run_tasks(failing, TASKS)
    assert not failed.success
    assert value(registry, "oma_runner_model_calls_total", **labels, outcome="error") >= 1


def test_metrics_port_from_the_environment(tmp_path: Path) -> None:
    env = runner_env(tmp_path, runner_spec({"file": {"path": "s.json"}}))
    env.pop("OMA_METRICS_PORT", None)
    assert RunnerConfig.from_env(env).metrics_port is None
    assert RunnerConfig.from_env({**env, "OMA_METRICS_PORT": "0"}).metrics_port is None
    assert RunnerConfig.from_env({**env, "OMA_METRICS_PORT": "9100"}).metrics_port == 9100
    with pytest.raises(RunnerConfigError, match="OMA_METRICS_PORT is not a port number"):
        RunnerConfig.from_env({**env, "OMA_METRICS_PORT": "metrics"})


@pytest.mark.timeout(120)
def test_the_runner_serves_metrics_while_it_runs_and_reports_them(tmp_path: Path) -> None:
    port = free_port()
    env = runner_env(tmp_path, runner_spec({"file": {"path": str(tmp_path / "s.json")}}))
    runner = start_runner({**env, "OMA_METRICS_PORT": str(port)})
    text = ""
    deadline = time.monotonic() + 60
    # The script's second model call takes 1.5 s: by then the first call is committed.
    while 'oma_runner_tool_calls_total{source="executed"} 1.0' not in text:
        assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()[0]
        with contextlib.suppress(httpx.TransportError):  # not listening yet
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        time.sleep(0.05)
    assert "# TYPE oma_runner_checkpoint_save_seconds histogram" in text
    assert 'oma_runner_tool_calls_total{source="replayed"} 0.0' in text
    assert "oma_runner_checkpoint_save_failures_total 0.0" in text
    assert 'oma_runner_model_calls_total{model="",outcome="ok",provider="scripted"} 1.0' in text
    assert 'oma_runner_tokens_total{direction="input",model="",provider="scripted"}' in text
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    metrics: dict[str, Any] = termination_message(tmp_path)["metrics"]
    assert metrics["toolCalls"] == {"executed": 2, "replayed": 0}
    assert metrics["saves"] >= 4 and metrics["saveFailures"] == 0 and metrics["saveSeconds"] > 0
    assert metrics["modelCalls"] == 3 and metrics["modelSeconds"] >= 1.5  # the 1.5 s delay
    assert metrics["tokens"]["input"] > 0 and metrics["tokens"]["output"] > 0
