"""Restore from the exact store files the TypeScript implementation wrote (MANIFEST a, b, f)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4, CheckpointSnapshotV5
from oma.errors import CheckpointValidationError
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from tests.conformance_data import load_json
from tests.engine.helpers import RecordingStore, ToolLog, commit_effect_tool, copy_store_file

SECOND = "c8c0e970-013c-4f7f-bed5-cbac6fed522c"
FIRST = "6bfc32e3-f5e5-4bf0-a683-a289422ec4e4"


def conf_b_team(store: RecordingStore, log: ToolLog) -> tuple[ScriptedAdapter, Team]:
    """Scenario b's team as the TypeScript run had it: the second task calls P and Q in
    parallel, then answers."""
    model = ScriptedAdapter(
        {
            "# Task: second": [
                {
                    "tool_calls": [
                        {"id": "tu-b-p", "name": "commit_effect", "input": {"label": "P"}},
                        {"id": "tu-b-q", "name": "commit_effect", "input": {"label": "Q"}},
                    ]
                },
                {"text": "second done"},
            ],
        }
    )
    worker = AgentConfig(name="worker", adapter=model, tools=[commit_effect_tool(log)])
    team = Team(name="conf-b", agents=[worker], shared_memory_store=store)
    return model, team


async def test_b_crash_between_parallel_tool_calls_resumes_exactly(tmp_path: Path) -> None:
    store = RecordingStore(copy_store_file("b-crash-moment.store.json", tmp_path))
    log = ToolLog()
    model, team = conf_b_team(store, log)
    result = await OpenMultiAgent().restore(team, checkpoint=CheckpointOptions(run_id="conf-b"))

    assert result.success, result.status
    assert log.calls == [("tu-b-q", SECOND, {"label": "Q"})]  # P replayed, Q executed once
    (call,) = model.calls
    expected_input = load_json("b-after-restore.decoded.json")["modelCallsDuringRestore"][0][
        "messages"
    ]
    assert [m.to_wire() for m in call.messages] == expected_input
    assert [t.id for t in result.tasks] == [FIRST, SECOND]
    second = result.task_results[SECOND]
    assert second.output == "second done"
    assert (second.token_usage.input_tokens, second.token_usage.output_tokens) == (2, 2)
    assert [r.output for r in second.tool_calls] == ["committed:P", "committed:Q"]
    assert result.identity.run_id == "conf-b" and result.identity.attempt == 2
    assert result.identity.links and result.identity.links[0].trace_id == (
        "82f3244ca799b9d1492a60f0fa5780ac"
    )

    checkpoint_writes = [json.loads(v) for k, v in store.writes if k.startswith("__oma_chec")]
    phases = [[t["phase"] for t in w["inFlightTasks"]] for w in checkpoint_writes]
    assert phases == [["executing_tools"], ["awaiting_model"], ["completed"], [], []]
    assert all(w["version"] == 4 and w["identity"]["attempt"] == 2 for w in checkpoint_writes)
    assert [k for k, _ in store.writes].index(f"worker/task:{SECOND}:result") == 3
    final = await Checkpoint(store, run_id="conf-b").load_latest()
    assert isinstance(final, CheckpointSnapshotV4)
    assert final.queue.completed == [FIRST, SECOND] and final.in_flight_tasks == []
    assert final.turn_count == 2 and final.shared_memory is None


async def test_a_completed_run_restores_without_model_calls_and_one_write(tmp_path: Path) -> None:
    store = RecordingStore(copy_store_file("a-after-run.store.json", tmp_path))
    model = ScriptedAdapter([{"text": "must not be called"}])
    team = Team(
        name="conf-a",
        agents=[AgentConfig(name="alice", adapter=model), AgentConfig(name="bob", adapter=model)],
        shared_memory_store=InMemoryStore(),
    )
    result = await OpenMultiAgent().restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-a")
    )
    assert result.success and model.calls == []
    assert result.identity.attempt == 2 and result.identity.run_id == "conf-a"
    assert len(store.writes) == 1
    snapshot = json.loads(store.writes[0][1])
    assert snapshot["identity"]["attempt"] == 2 and len(snapshot["completedTaskResults"]) == 3
    assert snapshot["sharedMemory"]["turnCount"] == 3  # separate checkpoint store: embedded
    assert {r.output for r in result.task_results.values()} == {
        "research notes: three findings",
        "outline: intro, body, close",
        "final article built on research notes",
    }
    again = await OpenMultiAgent().restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-a")
    )
    assert again.success and again.identity.attempt == 3 and model.calls == []


async def test_a_v5_snapshot_of_the_reference_restores_as_its_v4_and_saves_v4(
    tmp_path: Path,
) -> None:
    """The reference writes v5 when its run keeps a run journal (v4 plus the journal's
    watermark, and per in-flight task its own mark and the lineage of each message). oma has
    no reference journal to replay a tail from: it resumes from the snapshot, exactly as from
    the v4 it contains, and saves v4 without the journal's marks (a lineage that no longer
    matches the conversation would be corruption to the reference)."""
    path = copy_store_file("b-crash-moment.store.json", tmp_path)
    state = json.loads(path.read_text())
    for entry in state["entries"]:
        if entry["key"].endswith("/latest"):
            snapshot = json.loads(entry["value"])
            snapshot |= {
                "version": 5,
                "journalWatermarkSeq": 17,
                "journalRef": {"kind": "JsonlRunJournal", "path": "/runs/conf-b.jsonl"},
            }
            for task in snapshot["inFlightTasks"]:
                task["journalSeq"] = 17
                task["conversationLineage"] = [[[1]] for _ in task["conversationMessages"]]
            entry["value"] = json.dumps(snapshot)
    path.write_text(json.dumps(state))
    store = RecordingStore(path)
    loaded = await Checkpoint(store, run_id="conf-b").load_latest()
    assert isinstance(loaded, CheckpointSnapshotV5) and isinstance(loaded, CheckpointSnapshotV4)
    assert loaded.journal_watermark_seq == 17 and loaded.journal_ref is not None
    assert loaded.in_flight_tasks[0].journal_seq == 17

    log = ToolLog()
    model, team = conf_b_team(store, log)
    result = await OpenMultiAgent().restore(team, checkpoint=CheckpointOptions(run_id="conf-b"))
    assert result.success and log.calls == [("tu-b-q", SECOND, {"label": "Q"})]
    assert len(model.calls) == 1  # the answer after P and Q, as from the v4
    writes = [v for k, v in store.writes if k.startswith("__oma_chec")]
    assert [json.loads(w)["version"] for w in writes] == [4, 4, 4, 4, 4]
    for word in ("journalWatermarkSeq", "journalRef", "journalSeq", "conversationLineage"):
        assert not any(word in w for w in writes), word


async def test_a_v5_lineage_that_does_not_match_its_conversation_is_refused(
    tmp_path: Path,
) -> None:
    path = copy_store_file("b-crash-moment.store.json", tmp_path)
    state = json.loads(path.read_text())
    for entry in state["entries"]:
        if entry["key"].endswith("/latest"):
            snapshot = json.loads(entry["value"]) | {"version": 5, "journalWatermarkSeq": -1}
            snapshot["inFlightTasks"][0]["conversationLineage"] = []
            entry["value"] = json.dumps(snapshot)
    path.write_text(json.dumps(state))
    with pytest.raises(CheckpointValidationError) as refused:
        await Checkpoint(RecordingStore(path), run_id="conf-b").load_latest()
    problems = "\n".join(refused.value.problems)
    assert "journalWatermarkSeq" in problems and "conversationLineage has 0 entries" in problems
