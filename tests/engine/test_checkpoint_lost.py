"""A run that has checkpointed is never silently started over: when the store forgot its
checkpoint (flushed, restarted without persistence, a key deleted), the run stops with
``CheckpointLostError`` and runs nothing; and task ids derive from the run id, so even a run
started over on purpose gives its tool calls the same idempotency keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma.checkpoint.attempts import attempts_key
from oma.checkpoint.keys import checkpoint_key
from oma.cli import app
from oma.errors import CheckpointLostError
from oma.local_run import run_spec
from oma.pod_contract import Exit
from oma.spec import RunSpec
from oma.store import FileStore
from oma.tasks.loading import load_task_specs
from oma.tools.builtin import builtin_tools
from oma.tools.define import AnyTool, define_tool
from tests.engine.helpers import LabelInput

PAY = {"id": "pay-1", "name": "ledger_append", "input": {"entry": "pay bob", "amount": 100}}
NEXT = {"id": "pay-2", "name": "ledger_append", "input": {"entry": "pay carol", "amount": 5}}


def _spec(
    store: Path, script: list[dict[str, Any]], tools: tuple[str, ...] = ("ledger_append", "forget")
) -> RunSpec:
    return RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": "clerk",
                    "tools": list(tools),
                    "model": {"provider": "scripted", "script": script},
                }
            ],
            "tasks": [{"title": "Pay", "description": "Pay bob.", "assignee": "clerk"}],
            "store": {"file": {"path": str(store)}},
        }
    )


def _tools(store: Path) -> dict[str, AnyTool]:
    """The built-ins, and ``forget``: deletes the run's checkpoint as a flushed store would."""

    async def forget(args: LabelInput, ctx: Any) -> str:
        await FileStore(store).delete(checkpoint_key(args.label))
        return "forgotten"

    return {**builtin_tools(), "forget": define_tool("forget", "Forget.", LabelInput, forget)}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("OMA_LEDGER_PATH", str(path))
    return path


def _entries(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


async def _run(store: Path, script: list[dict[str, Any]], **options: Any) -> Any:
    return await run_spec(
        _spec(store, script),
        run_id="payroll",
        tools=_tools(store),
        default_store_path=store,
        **options,
    )


PAYS_ONCE: list[dict[str, Any]] = [{"tool_calls": [PAY]}, {"text": "paid"}]


async def test_a_caller_that_knows_a_checkpoint_was_saved_gets_checkpoint_lost(
    tmp_path: Path, ledger: Path
) -> None:
    store = tmp_path / "store.json"
    await _run(store, PAYS_ONCE)
    assert len(_entries(ledger)) == 1
    store.unlink()  # the store forgot everything, its attempt log too
    with pytest.raises(CheckpointLostError) as caught:
        await _run(store, PAYS_ONCE, expect_checkpoint=True)
    assert caught.value.code == "CHECKPOINT_LOST"
    assert "an earlier attempt of this run saved one" in str(caught.value)
    assert "Restore the store from a backup" in str(caught.value)
    assert len(_entries(ledger)) == 1  # nothing ran
    assert not store.exists() or not await FileStore(store).list()  # and nothing was written


async def test_an_attempt_log_without_its_checkpoint_refuses_to_start_over(
    tmp_path: Path, ledger: Path
) -> None:
    store = tmp_path / "store.json"
    await _run(store, PAYS_ONCE)
    await FileStore(store).delete(checkpoint_key("payroll"))  # the log stays
    with pytest.raises(CheckpointLostError, match="attempt log shows"):
        await _run(store, PAYS_ONCE)
    assert len(_entries(ledger)) == 1


async def test_a_deliberate_start_over_reuses_the_idempotency_keys(
    tmp_path: Path, ledger: Path
) -> None:
    store = tmp_path / "store.json"
    await _run(store, PAYS_ONCE)
    fresh = FileStore(store)
    await fresh.delete(checkpoint_key("payroll"))
    await fresh.delete(attempts_key(checkpoint_key("payroll")))  # as 'oma checkpoint delete'
    again = await _run(store, PAYS_ONCE)
    assert not again.resumed and again.result.status.code == "ok"
    (entry,) = _entries(ledger)  # the same task id, so the same key: appended once
    assert entry["entry"] == "pay bob"


async def test_a_checkpoint_gone_mid_run_stops_the_attempt_before_its_next_tool(
    tmp_path: Path, ledger: Path
) -> None:
    store = tmp_path / "store.json"
    forget = {"id": "forget-1", "name": "forget", "input": {"label": "payroll"}}
    script: list[dict[str, Any]] = [
        {"tool_calls": [PAY]},
        {"tool_calls": [forget]},
        {"tool_calls": [NEXT]},
        {"text": "x"},
    ]
    with pytest.raises(CheckpointLostError, match="this attempt saved it earlier"):
        await _run(store, script)
    assert [e["entry"] for e in _entries(ledger)] == ["pay bob"]  # carol was never paid


def test_task_ids_derive_from_the_run_id_and_the_tasks_place() -> None:
    specs = [{"title": "A", "description": "a"}, {"title": "B", "description": "b"}]
    one = [t.id for t in load_task_specs(specs, ["x"], run_id="r").tasks]
    assert one == [t.id for t in load_task_specs(specs, ["x"], run_id="r").tasks]
    assert one != [t.id for t in load_task_specs(specs, ["x"], run_id="s").tasks]
    assert len(set(one)) == 2
    random = [t.id for t in load_task_specs(specs, ["x"]).tasks]
    assert random != [t.id for t in load_task_specs(specs, ["x"]).tasks]


def test_oma_run_expect_checkpoint_exits_13_and_says_what_to_do(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    plain = _spec(tmp_path / "s.json", PAYS_ONCE, tools=("ledger_append",))
    spec.write_text(plain.model_dump_json(by_alias=True, exclude_none=True))
    result = CliRunner().invoke(
        app, ["run", str(spec), "--run-id", "payroll", "--expect-checkpoint"]
    )
    assert result.exit_code == int(Exit.CHECKPOINT_LOST) == 13, result.output
    assert "checkpoint lost" in result.output and "new run id" in result.output
