"""v1, v2 and v3 snapshots the TypeScript implementation wrote restore as it restored them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oma.checkpoint import DEFAULT_CHECKPOINT_KEY, Checkpoint, CheckpointSnapshotV4
from oma.errors import CheckpointValidationError
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, RunIdConflictError
from oma.store import FileStore
from oma.team import AgentConfig, Team
from oma.tools import define_tool
from tests.conformance_data import load_json
from tests.engine.helpers import Events, LabelInput, ToolLog, commit_effect_tool


def _case(name: str) -> dict[str, Any]:
    for case in load_json("f-legacy-snapshots.json")["cases"]:
        if case["name"] == name:
            return dict(case)
    raise AssertionError(name)


def _store(case: dict[str, Any], tmp_path: Path) -> FileStore:
    path = tmp_path / "store.json"
    path.write_text(json.dumps(case["storeBefore"]), encoding="utf-8")
    return FileStore(path)


def _worker(model: ScriptedAdapter, *tools: Any) -> Team:
    return Team(name="legacy", agents=[AgentConfig(name="worker", adapter=model, tools=tools)])


def _model_inputs(model: ScriptedAdapter) -> list[list[dict[str, Any]]]:
    return [[m.to_wire() for m in call.messages] for call in model.calls]


def _expected_inputs(case: dict[str, Any], agent: str = "worker") -> list[list[dict[str, Any]]]:
    return [call["messages"] for call in case["modelCalls"][agent]]


async def test_v1_completed_run_is_attempt_2_without_links(tmp_path: Path) -> None:
    case = _case("v1-runTasks-with-runId")
    store = _store(case, tmp_path)
    model = ScriptedAdapter([{"text": "never"}])
    result = await OpenMultiAgent().restore(
        _worker(model), checkpoint=CheckpointOptions(store=store, run_id="legacy-run")
    )
    assert result.success and model.calls == []
    assert result.identity.run_id == "legacy-run" and result.identity.attempt == 2
    assert result.identity.links is None
    saved = await Checkpoint(store, run_id="legacy-run").load_latest()
    assert isinstance(saved, CheckpointSnapshotV4) and saved.identity.attempt == 2


async def test_v1_run_id_conflicts_refuse_before_any_work(tmp_path: Path) -> None:
    case = _case("v1-runTasks-with-runId-conflict")
    store = _store(case, tmp_path)
    model = ScriptedAdapter([{"text": "never"}])
    before = (tmp_path / "store.json").read_bytes()
    with pytest.raises(RunIdConflictError) as options_conflict:
        await OpenMultiAgent().restore(
            _worker(model),
            run_id="different-run",
            checkpoint=CheckpointOptions(store=store, run_id="legacy-run"),
        )
    assert str(options_conflict.value) == case["restore"]["error"]["message"]
    explicit = _case("v1-runTasks-with-runId-conflict-explicit-key")
    with pytest.raises(RunIdConflictError) as key_conflict:
        await OpenMultiAgent().restore(
            _worker(model),
            run_id="different-run",
            checkpoint=CheckpointOptions(store=store, key="__oma_checkpoint__/legacy-run/latest"),
        )
    assert str(key_conflict.value) == explicit["restore"]["error"]["message"]
    assert model.calls == [] and (tmp_path / "store.json").read_bytes() == before


async def test_v1_partial_run_gets_a_new_run_id_and_runs_only_the_rest(tmp_path: Path) -> None:
    case = _case("v1-runTasks-default-key-partial")
    store = _store(case, tmp_path)
    model = ScriptedAdapter({"# Task: second": [{"text": "second output"}]})
    result = await OpenMultiAgent().restore(
        _worker(model), checkpoint=CheckpointOptions(store=store)
    )
    assert result.success
    assert _model_inputs(model) == _expected_inputs(case)
    assert result.identity.attempt == 2 and result.identity.links is None
    assert result.identity.run_id not in ("", "legacy-run")
    first = result.task_results["first"]  # restored with its rich tool_result content
    expected_first = case["snapshot"]["completedTaskResults"][0]["agentResult"]
    assert first.messages == expected_first["messages"]
    assert result.agent_results["worker"].output == "first output\n\n---\n\nsecond output"
    saved = await Checkpoint(store, key=DEFAULT_CHECKPOINT_KEY).load_latest()
    assert isinstance(saved, CheckpointSnapshotV4)
    assert saved.identity.run_id == result.identity.run_id


async def test_v1_run_team_restore_synthesizes_once_without_redecomposing(
    tmp_path: Path,
) -> None:
    case = _case("v1-runTeam-synthesis")
    store = _store(case, tmp_path)
    model = ScriptedAdapter({"# Task: second": [{"text": "second output"}]})
    lead_model = ScriptedAdapter([{"text": "SYNTHESIZED ANSWER"}])
    lead = AgentConfig(name="coordinator", adapter=lead_model)
    result = await OpenMultiAgent().restore(
        _worker(model), checkpoint=CheckpointOptions(store=store), coordinator=lead
    )
    assert result.success
    assert _model_inputs(model) == _expected_inputs(case)
    assert _model_inputs(lead_model) == _expected_inputs(case, "coordinator")
    assert result.agent_results["coordinator"].output == "SYNTHESIZED ANSWER"


async def test_run_team_restore_reports_synthesis_failure(tmp_path: Path) -> None:
    case = _case("v1-runTeam-synthesis")
    store = _store(case, tmp_path)
    model = ScriptedAdapter({"# Task: second": [{"text": "second output"}]})
    broken = AgentConfig(name="coordinator", adapter=ScriptedAdapter({"never matches": []}))
    events = Events()
    result = await OpenMultiAgent(on_progress=events).restore(
        _worker(model), checkpoint=CheckpointOptions(store=store), coordinator=broken
    )
    assert not result.success and "Synthesis failed" in (result.status.message or "")
    assert "synthesis_failed" in events.kinds()
    assert "coordinator" not in result.agent_results
    assert {t.status for t in result.tasks} == {"completed"}  # the task work is kept


async def test_v2_in_progress_task_reruns_from_its_start(tmp_path: Path) -> None:
    case = _case("v2-identity-inprogress")
    store = _store(case, tmp_path)
    model = ScriptedAdapter({"# Task: second": [{"text": "second output"}]})
    result = await OpenMultiAgent().restore(
        _worker(model), checkpoint=CheckpointOptions(store=store)
    )
    assert result.success and _model_inputs(model) == _expected_inputs(case)
    assert result.identity.run_id == "adaptive-restore" and result.identity.attempt == 2
    assert result.identity.links is not None
    assert result.identity.links[0].to_wire() == {
        "traceId": "0" * 31 + "1",
        "spanId": "0" * 15 + "1",
        "relation": "continued_from",
    }


async def test_v3_committed_call_is_replayed_not_executed(tmp_path: Path) -> None:
    case = _case("v3-literal-commit-fixed")
    store = _store(case, tmp_path)
    executed: list[str] = []

    async def echo(args: LabelInput, ctx: Any) -> str:
        executed.append(ctx.tool_call_id)
        return "executed"

    model = ScriptedAdapter([{"text": "after echo"}])  # the literal has no assistant turn
    tool = define_tool("echo", "Echo.", LabelInput, echo)
    result = await OpenMultiAgent().restore(
        _worker(model, tool), checkpoint=CheckpointOptions(store=store)
    )
    assert result.success and executed == []
    assert _model_inputs(model) == _expected_inputs(case)
    assert result.identity.run_id == "run-1" and result.identity.attempt == 2
    assert result.identity.links and result.identity.links[0].trace_id == "trace-1"
    assert result.task_results["a"].output == "after echo"


async def test_v3_from_crash_runs_only_the_uncommitted_call(tmp_path: Path) -> None:
    case = _case("v3-from-conf-b-crash")
    store = _store(case, tmp_path)
    log = ToolLog()
    model = ScriptedAdapter({"# Task: second": [{"text": "unused"}, {"text": "second done"}]})
    result = await OpenMultiAgent().restore(
        _worker(model, commit_effect_tool(log)),
        checkpoint=CheckpointOptions(store=store, run_id="conf-b"),
    )
    assert result.success and log.ids() == ["tu-b-q"]
    assert _model_inputs(model) == _expected_inputs(case)
    assert result.identity.attempt == 2


async def test_v3_with_mismatched_commit_refuses_to_restore(tmp_path: Path) -> None:
    case = _case("v3-literal-commit-mismatch")
    store = _store(case, tmp_path)
    model = ScriptedAdapter([{"text": "never"}])
    with pytest.raises(CheckpointValidationError, match="is not a checkpoint snapshot"):
        await OpenMultiAgent().restore(_worker(model), checkpoint=CheckpointOptions(store=store))
    assert model.calls == []
