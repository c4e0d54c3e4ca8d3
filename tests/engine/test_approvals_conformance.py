"""Durable approvals against the TypeScript data: tool-call (c) and dispatch (d) scenarios."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from oma.approval import Suspend, get_approval_record
from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore
from oma.tasks import Task
from tests.conformance_data import load_json
from tests.engine.approval_fixtures import (
    CHARGE_HASH,
    CHARGE_REQUEST,
    CHARGE_TASK,
    DEPLOY_TASK,
    Recorder,
    charge_team,
    deploy_team,
    gate_context_fields,
    stored,
    ts_store,
)
from tests.engine.helpers import RecordingStore


def _recording(calls: list[Task], answer: bool) -> Callable[[Task], bool]:
    def gate(task: Task) -> bool:
        calls.append(task)
        return answer

    return gate


PLAN_C = {
    "version": 1,
    "tasks": [
        {
            "id": CHARGE_TASK,
            "title": "Charge",
            "description": "Charge the card.",
            "assignee": "operator",
        }
    ],
}


async def test_c1_tool_suspension_matches_the_typescript_request(tmp_path: Path) -> None:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    store = RecordingStore(tmp_path / "c1.json")
    events: list[str] = []
    orchestrator = OpenMultiAgent(
        on_tool_call=recorder.gate(Suspend("Finance review")),
        on_progress=lambda e: events.append(e.type),
    )
    result = await orchestrator.run_from_plan(
        team, PLAN_C, checkpoint=CheckpointOptions(store=store, run_id="conf-c")
    )
    assert result.status.code == "suspended"
    assert result.status.message == "Durable approval required before task execution can continue."
    assert recorder.tool_calls == [] and [t.status for t in result.tasks] == ["in_progress"]
    (request,) = result.pending_approvals
    assert (request.id, request.request_hash) == (CHARGE_REQUEST, CHARGE_HASH)  # byte-identical
    expected = load_json("c1-suspended.decoded.json")
    ts_request = expected["returnedPendingApprovals"][0]
    assert {**request.to_wire(), "requestedAt": None} == {**ts_request, "requestedAt": None}
    (gate_call,) = recorder.gate_calls
    assert gate_context_fields(gate_call) == expected["gateCalls"][0]
    keys = [key for key, _ in store.writes]
    assert keys[:3] == ["__oma_checkpoint__/conf-c/latest"] * 2 + [
        f"__oma_approval__/{CHARGE_REQUEST}"
    ]
    assert "approval_pending" in events and "task_complete" not in events
    record = await get_approval_record(store, CHARGE_REQUEST)
    assert record is not None and record.decision is None


async def test_c6_undecided_restore_does_no_work_and_writes_nothing(tmp_path: Path) -> None:
    store, path = ts_store("c1-suspended.store.json", tmp_path)
    before = path.read_bytes()
    recorder = Recorder()
    team, model = charge_team(recorder)
    result = await OpenMultiAgent(on_tool_call=recorder.gate(True)).restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-c")
    )
    assert result.status.code == "suspended"
    assert result.status.message == "Durable approval decision pending."
    assert [r.id for r in result.pending_approvals] == [CHARGE_REQUEST]
    assert result.identity.attempt == 2
    assert recorder.tool_calls == [] and recorder.gate_calls == [] and model.calls == []
    assert path.read_bytes() == before


async def test_c3_approved_call_runs_once_without_asking_the_gate(tmp_path: Path) -> None:
    store, path = ts_store("c2-approved.store.json", tmp_path)
    recorder = Recorder()
    team, model = charge_team(recorder)
    result = await OpenMultiAgent(on_tool_call=recorder.gate(False)).restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-c")
    )
    assert result.success and result.identity.attempt == 2
    assert recorder.gate_calls == []
    assert recorder.tool_calls == [("tool-call-1", {"amount": 7})]
    (call,) = model.calls
    assert call.messages[-1].to_wire() == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tool-call-1",
                "content": "charged:7",
                "is_error": False,
            }
        ],
    }
    assert result.pending_approvals == []
    assert [d.decision for d in result.approval_decisions] == ["approved"]
    assert result.task_results[CHARGE_TASK].tool_calls[0].input == {"amount": "7"}
    checkpoint = stored(path, "__oma_checkpoint__/")
    assert checkpoint["identity"]["attempt"] == 2 and checkpoint["inFlightTasks"] == []
    assert checkpoint["pendingApprovals"] == [] and len(checkpoint["approvalDecisions"]) == 1
    ts_row = stored(tmp_path.parent / tmp_path.name / "c2-approved.store.json", "__oma_approval__/")
    assert ts_row["decision"]["decision"] == "approved"  # the ledger row was not rewritten


async def test_c5_rejected_call_becomes_a_denied_result_the_model_sees(tmp_path: Path) -> None:
    store, _ = ts_store("c4-rejected.store.json", tmp_path)
    recorder = Recorder()
    team, model = charge_team(recorder, after_tool="charge cancelled")
    result = await OpenMultiAgent(on_tool_call=recorder.gate(True)).restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-c")
    )
    assert result.success and recorder.tool_calls == [] and recorder.gate_calls == []
    (call,) = model.calls
    assert call.messages[-1].to_wire() == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tool-call-1",
                "content": 'Tool "charge_card" denied by durable approval.',
                "is_error": True,
            }
        ],
    }
    assert result.tasks[0].result == "charge cancelled"
    assert [d.decision for d in result.approval_decisions] == ["rejected"]


async def test_d1_dispatch_suspension(tmp_path: Path) -> None:
    team, _ = deploy_team()
    store = RecordingStore(tmp_path / "d1.json")
    gate_calls: list[str] = []

    def dispatch(task: object) -> object:
        title = getattr(task, "title", "")
        gate_calls.append(title)
        return Suspend("Change board review") if title == "Deploy" else True

    tasks: list[dict[str, Any]] = [
        {"title": "Build", "description": "Build it."},
        {
            "title": "Deploy",
            "description": "MARK-DEPLOY: deploy the reviewed build.",
            "dependsOn": ["Build"],
        },
    ]
    result = await OpenMultiAgent(on_task_dispatch=dispatch).run_tasks(
        team, tasks, checkpoint=CheckpointOptions(store=store, run_id="conf-d")
    )
    assert result.status.code == "suspended"
    assert result.status.message == "Task dispatch approval pending."
    assert [t.status for t in result.tasks] == ["completed", "pending"] and gate_calls == [
        "Build",
        "Deploy",
    ]
    (request,) = result.pending_approvals
    deploy = result.tasks[1]
    assert request.scope == "task_dispatch" and request.boundary == deploy.id
    assert request.content == {"kind": "task_dispatch", "task": deploy.to_wire()}
    keys = [key for key, _ in store.writes]
    row = keys.index(f"__oma_approval__/{request.id}")
    assert keys[row - 1] == keys[row + 1] == "__oma_checkpoint__/conf-d/latest"
    saved = await Checkpoint(store, run_id="conf-d").load_latest()
    assert isinstance(saved, CheckpointSnapshotV4) and saved.in_flight_tasks == []
    assert [r.id for r in saved.pending_approvals] == [request.id]


async def test_d3_rejected_dispatch_is_terminal_across_restores(tmp_path: Path) -> None:
    store, path = ts_store("d2-rejected.store.json", tmp_path)
    team, model = deploy_team()
    asked: list[Task] = []
    orchestrator = OpenMultiAgent(on_task_dispatch=_recording(asked, True))
    first = await orchestrator.restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-d")
    )
    assert first.status.code == "rejected"
    assert first.status.message == "Durable approval rejected."
    deploy = next(t for t in first.tasks if t.id == DEPLOY_TASK)
    assert (deploy.status, deploy.result) == ("skipped", "Skipped: durable approval rejected.")
    assert model.calls == [] and asked == [] and first.identity.attempt == 2
    checkpoint = stored(path, "__oma_checkpoint__/")
    assert checkpoint["queue"]["skipped"] == [DEPLOY_TASK] and checkpoint["pendingApprovals"] == []
    assert [d["decision"] for d in checkpoint["approvalDecisions"]] == ["rejected"]
    after_first = path.read_bytes()
    second = await orchestrator.restore(
        team, checkpoint=CheckpointOptions(store=FileStore(path), run_id="conf-d")
    )
    assert second.status.code == "rejected" and second.identity.attempt == 3
    assert path.read_bytes() == after_first and model.calls == []


async def test_d5_approved_dispatch_runs_without_asking_the_gate(tmp_path: Path) -> None:
    store, path = ts_store("d4-approved.store.json", tmp_path)
    team, model = deploy_team()
    asked: list[Task] = []
    result = await OpenMultiAgent(on_task_dispatch=_recording(asked, False)).restore(
        team, checkpoint=CheckpointOptions(store=store, run_id="conf-d")
    )
    assert result.success and asked == [] and result.identity.attempt == 2
    expected = load_json("d4-d5-approve-branch.decoded.json")["modelCallsDuringRestore"]
    assert [[m.to_wire() for m in c.messages] for c in model.calls] == [
        call["messages"] for call in expected
    ]
    assert [d.decision for d in result.approval_decisions] == ["approved"]
    assert result.pending_approvals == []
    checkpoint = stored(path, "__oma_checkpoint__/")
    assert checkpoint["pendingApprovals"] == [] and checkpoint["queue"]["completed"][-1] == (
        DEPLOY_TASK
    )
