"""A strict save that fails at a suspension (a gate's approval request, a tool call's, or the
"started" mark before a non-idempotent tool) ends the attempt with the save's own error when the
error is about the attempt rather than the request: the store is unreachable (transient: the
runner exits 1 and the operator retries), a newer attempt took the run over (fenced: 12), or the
checkpoint is gone (13). It is never turned into a permanent failure of the run (2) that no
retry would repair. Either way nothing is reported: no approval row, no ``approval_pending``
event, and the gated work does not run. A failure that is about the request (its snapshot cannot
be built) still ends as ``APPROVAL_INTEGRITY_ERROR``, as the reference has it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from oma import local_run
from oma.approval import DurableApprovalError, Suspend
from oma.cli import app
from oma.errors import (
    CheckpointFencedError,
    CheckpointLostError,
    OmaError,
    StoreAuthError,
    StoreUnavailableError,
)
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, TeamRunResult, saver
from oma.orchestrator.snapshot_build import encode_snapshot
from oma.pod_contract import Exit, exit_for_error
from oma.store import FileStore
from oma.store.base import MemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.engine.approval_fixtures import Recorder, charge_team

CHECKPOINTS = "__oma_checkpoint__/"
APPROVAL_ROWS = "__oma_approval__/"


def carries_a_request(value: str) -> bool:
    return '"approvalRequest"' in value or '"pendingApprovals":[{' in value


def carries_a_start_mark(value: str) -> bool:
    return '"started":{' in value


class FailingAtSuspension(FileStore):
    """A real file store whose checkpoint write that carries a suspension meets ``failure``:

    - ``unavailable``: the store cannot be reached (``StoreUnavailableError``, transient);
    - ``auth``: the store refuses the credentials (``StoreAuthError``, a permanent store error);
    - ``newer``: a newer attempt writes the checkpoint just before (the fenced save loses);
    - ``gone``: the checkpoint is deleted just before (flushed: the fenced save finds nothing).
    """

    def __init__(
        self, path: Path, failure: str, carries: Callable[[str], bool] = carries_a_request
    ) -> None:
        super().__init__(path)
        self.failure = failure
        self.carries = carries
        self.hits = 0

    async def _before(self, key: str, value: str) -> None:
        if not key.startswith(CHECKPOINTS) or key.endswith("/attempts"):
            return
        if not self.carries(value):
            return
        self.hits += 1
        if self.failure == "unavailable":
            raise StoreUnavailableError("store unreachable (injected)")
        if self.failure == "auth":
            raise StoreAuthError("credentials rejected (injected)")
        if self.failure == "newer":
            entry = await self.get(key)
            if entry is None:  # this attempt never saved: another start of the run saves first
                await FileStore.set(self, key, json.dumps({"another": "start"}))
                return
            newer = json.loads(entry.value)
            newer["identity"]["attempt"] += 1  # what a newer attempt's claim would look like
            await FileStore.set(self, key, json.dumps(newer))
        elif self.failure == "gone":
            await FileStore.delete(self, key)

    async def set(self, key: str, value: str, metadata: dict[str, Any] | None = None) -> None:
        await self._before(key, value)
        await super().set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        await self._before(key, value)
        return await super().compare_and_set(key, expected, value, metadata)


@dataclass
class Scenario:
    """One kind of suspension: how to run it, and what must not have run when it fails."""

    run: Callable[[CheckpointOptions, list[str]], Awaitable[TeamRunResult]]
    nothing_ran: Callable[[], bool]
    carries: Callable[[str], bool] = carries_a_request


PLAN_TEXT = json.dumps([{"title": "One", "description": "1"}, {"title": "Two", "description": "2"}])


def _steps_team() -> tuple[Team, ScriptedAdapter]:
    model = ScriptedAdapter({"# Task: One": [{"text": "one"}], "# Task: Two": [{"text": "two"}]})
    return Team(name="steps", agents=[AgentConfig(name="w", adapter=model)]), model


def plan_scenario() -> Scenario:
    team, model = _steps_team()
    lead = AgentConfig(
        name="coordinator", adapter=ScriptedAdapter({"# Goal decomposition": [{"text": PLAN_TEXT}]})
    )

    async def run(options: CheckpointOptions, events: list[str]) -> TeamRunResult:
        orchestrator = OpenMultiAgent(
            on_plan_ready=lambda tasks: Suspend("plan review"),
            on_progress=lambda e: events.append(e.type),
        )
        return await orchestrator.run_team(team, "ship it", coordinator=lead, checkpoint=options)

    return Scenario(run, lambda: model.calls == [])


def dispatch_scenario() -> Scenario:
    team, model = _steps_team()
    tasks: list[dict[str, Any]] = [
        {"title": "One", "description": "1"},
        {"title": "Two", "description": "2", "dependsOn": ["One"]},
    ]

    def gate(task: Any) -> Any:
        return Suspend("change board") if task.title == "Two" else True

    async def run(options: CheckpointOptions, events: list[str]) -> TeamRunResult:
        orchestrator = OpenMultiAgent(
            on_task_dispatch=gate, on_progress=lambda e: events.append(e.type)
        )
        return await orchestrator.run_tasks(team, tasks, checkpoint=options)

    return Scenario(run, lambda: len(model.calls) == 1)  # One ran; Two never did


def round_scenario() -> Scenario:
    team, model = _steps_team()
    tasks: list[dict[str, Any]] = [
        {"title": "One", "description": "1"},
        {"title": "Two", "description": "2", "dependsOn": ["One"]},
    ]

    async def run(options: CheckpointOptions, events: list[str]) -> TeamRunResult:
        orchestrator = OpenMultiAgent(
            on_approval=lambda done, upcoming: Suspend("round review"),
            on_progress=lambda e: events.append(e.type),
        )
        return await orchestrator.run_tasks(team, tasks, checkpoint=options)

    return Scenario(run, lambda: len(model.calls) == 1)


def tool_scenario() -> Scenario:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    task = [{"title": "Pay", "description": "Pay.", "assignee": "operator"}]

    async def run(options: CheckpointOptions, events: list[str]) -> TeamRunResult:
        orchestrator = OpenMultiAgent(
            on_tool_call=recorder.gate(Suspend("finance review")),
            on_progress=lambda e: events.append(e.type),
        )
        return await orchestrator.run_tasks(team, task, checkpoint=options)

    return Scenario(run, lambda: recorder.tool_calls == [])


class CountInput(BaseModel):
    item: str


def started_mark_scenario() -> Scenario:
    """No gate: a non-idempotent tool, whose "started" mark is a strict save."""
    ran: list[str] = []

    async def count(args: CountInput, ctx: ToolContext) -> str:
        ran.append(args.item)
        return "counted"

    tool = define_tool("count", "Count once.", CountInput, count, idempotent=False)
    model = ScriptedAdapter(
        [
            {"tool_calls": [{"id": "c1", "name": "count", "input": {"item": "x"}}]},
            {"text": "counted"},
        ]
    )
    team = Team(name="counting", agents=[AgentConfig(name="w", adapter=model, tools=[tool])])
    task = [{"title": "Count", "description": "Count.", "assignee": "w"}]

    async def run(options: CheckpointOptions, events: list[str]) -> TeamRunResult:
        orchestrator = OpenMultiAgent(on_progress=lambda e: events.append(e.type))
        return await orchestrator.run_tasks(team, task, checkpoint=options)

    # Nothing after the mark: the tool did not run, and the model was not asked again.
    return Scenario(run, lambda: ran == [] and len(model.calls) == 1, carries_a_start_mark)


SCENARIOS = {
    "plan": plan_scenario,
    "dispatch": dispatch_scenario,
    "round": round_scenario,
    "tool": tool_scenario,
    "started-mark": started_mark_scenario,
}


async def _rows(store: MemoryStore) -> list[str]:
    return [e.key for e in await store.list() if e.key.startswith(APPROVAL_ROWS)]


async def _fail(
    tmp_path: Path, name: str, failure: str, *, fence: bool = True
) -> tuple[BaseException, FailingAtSuspension, Scenario, list[str]]:
    scenario = SCENARIOS[name]()
    store = FailingAtSuspension(tmp_path / "store.json", failure, scenario.carries)
    events: list[str] = []
    options = CheckpointOptions(store=store, run_id=f"{name}-{failure}", fence=fence)
    try:
        result = await scenario.run(options, events)
    except OmaError as exc:
        error = exc
    else:
        pytest.fail(f"the run returned {result.status} instead of ending the attempt")
    assert store.hits == 1  # the suspension's save was tried once, and nothing after it
    assert await _rows(store) == [] and "approval_pending" not in events  # nothing reported
    assert scenario.nothing_ran()
    return error, store, scenario, events


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("fence", [True, False])
async def test_an_unreachable_store_at_a_suspension_ends_the_attempt_as_transient(
    tmp_path: Path, name: str, fence: bool
) -> None:
    error, _, _, _ = await _fail(tmp_path, name, "unavailable", fence=fence)
    assert isinstance(error, StoreUnavailableError), repr(error)
    assert exit_for_error(error) == Exit.TRANSIENT


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_store_error_at_a_suspension_keeps_its_own_code(tmp_path: Path, name: str) -> None:
    """A permanent store error is still the store's (exit 2 either way), not the request's."""
    error, _, _, _ = await _fail(tmp_path, name, "auth")
    assert isinstance(error, StoreAuthError), repr(error)
    assert error.code == "STORE_AUTH_FAILED" and exit_for_error(error) == Exit.PERMANENT


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_newer_attempt_at_a_suspension_fences_this_one(tmp_path: Path, name: str) -> None:
    error, store, _, _ = await _fail(tmp_path, name, "newer")
    assert isinstance(error, CheckpointFencedError) and not isinstance(error, CheckpointLostError)
    # A plan is suspended before the run's first save: another start of the run saved first.
    # Every other suspension comes after this attempt saved: it was superseded.
    assert error.first_save is (name == "plan")
    entry = await store.get(f"{CHECKPOINTS}{name}-newer/latest")
    assert entry is not None and '"approvalRequest"' not in entry.value  # the newer one's


@pytest.mark.parametrize("name", [name for name in SCENARIOS if name != "plan"])  # saved before
async def test_a_checkpoint_gone_at_a_suspension_is_lost(tmp_path: Path, name: str) -> None:
    error, store, _, _ = await _fail(tmp_path, name, "gone")
    assert isinstance(error, CheckpointLostError), repr(error)
    assert await store.get(f"{CHECKPOINTS}{name}-gone/latest") is None  # nothing written again


def _unbuildable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot of a run with a pending request cannot be built (a bug, bad data): a
    failure about the request, not about the store or the attempt."""
    real = encode_snapshot

    async def encode(context: Any, **kwargs: Any) -> Any:
        if context.pending_approvals:
            raise ValueError("snapshot cannot be built (injected)")
        return await real(context, **kwargs)

    monkeypatch.setattr(saver, "encode_snapshot", encode)  # the one saver.py calls


async def test_a_plan_suspension_whose_snapshot_cannot_be_built_is_an_integrity_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unbuildable(monkeypatch)
    scenario = plan_scenario()
    store = FileStore(tmp_path / "store.json")
    events: list[str] = []
    options = CheckpointOptions(store=store, run_id="unbuildable", fence=True)
    with pytest.raises(DurableApprovalError) as caught:
        await scenario.run(options, events)
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"
    assert "could not be checkpointed; suspension was not reported" in str(caught.value)
    assert exit_for_error(caught.value) == Exit.PERMANENT
    assert await _rows(store) == [] and "approval_pending" not in events
    assert scenario.nothing_ran()


@pytest.mark.parametrize("name", ["dispatch", "round"])
async def test_a_gate_suspension_whose_snapshot_cannot_be_built_is_a_callback_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """As the reference: a failure in a dispatch (or round) gate's suspend path is that gate's
    error: the run ends ``error`` with APPROVAL_INTEGRITY_ERROR's message, the rest skipped."""
    _unbuildable(monkeypatch)
    scenario = SCENARIOS[name]()
    store = FileStore(tmp_path / "store.json")
    events: list[str] = []
    options = CheckpointOptions(store=store, run_id="unbuildable", fence=True)
    result = await scenario.run(options, events)
    assert result.status.code == "error" and not result.pending_approvals
    assert "could not be checkpointed; suspension was not reported" in str(result.status.message)
    assert [t.status for t in result.tasks] == ["completed", "skipped"]
    assert await _rows(store) == [] and "approval_pending" not in events
    assert scenario.nothing_ran()


# ---- the process's exit code: ``oma run`` (the runner maps errors the same way) --------------


def _spec_file(tmp_path: Path, approvals: dict[str, Any]) -> Path:
    """Warm, then Count (which calls the non-idempotent ``tally``): the suspension comes after
    the run's first save, so it can be superseded or lost."""
    script = {
        "# Task: Warm": [{"text": "warm"}],
        "# Task: Count": [
            {"tool_calls": [{"id": "t1", "name": "tally", "input": {"item": "x"}}]},
            {"text": "done"},
        ],
    }
    spec = {
        "agents": [
            {"name": "w", "tools": ["tally"], "model": {"provider": "scripted", "script": script}}
        ],
        "tasks": [
            {"title": "Warm", "description": "Warm.", "assignee": "w"},
            {"title": "Count", "description": "Count.", "assignee": "w", "dependsOn": ["Warm"]},
        ],
        "approvals": approvals,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize(
    ("failure", "exit_code"),
    [
        ("unavailable", Exit.TRANSIENT),
        ("newer", Exit.FENCED),
        ("gone", Exit.CHECKPOINT_LOST),
        ("auth", Exit.PERMANENT),
    ],
)
@pytest.mark.parametrize(
    ("approvals", "carries"),
    [
        ({"tools": ["tally"]}, carries_a_request),
        ({"dispatch": ["Count"]}, carries_a_request),
        ({}, carries_a_start_mark),
    ],
    ids=["tool", "dispatch", "started-mark"],
)
def test_oma_run_exits_with_the_code_of_the_failed_suspension_save(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
    exit_code: Exit,
    approvals: dict[str, Any],
    carries: Callable[[str], bool],
) -> None:
    tally = tmp_path / "tally.jsonl"
    monkeypatch.setenv("OMA_TALLY_PATH", str(tally))
    store = FailingAtSuspension(tmp_path / "store.json", failure, carries)
    monkeypatch.setattr(local_run, "open_store", lambda spec, default: store)
    spec = _spec_file(tmp_path, approvals)
    result = CliRunner().invoke(app, ["run", str(spec), "--run-id", "counting"])
    assert result.exit_code == exit_code, result.output
    assert store.hits == 1 and not tally.exists()  # the tool never ran
