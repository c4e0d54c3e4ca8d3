"""Runs that share a store never meet: a tenant (a TeamRun's Kubernetes namespace) has its own
part of the store, and a run's shared memory is its own unless it names a scope to share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oma.local_run import run_spec
from oma.spec import RunSpec
from oma.store import FileStore
from oma.tools.builtin import builtin_tools


def _spec(path: Path, answer: str, **extra: Any) -> RunSpec:
    return RunSpec.model_validate(
        {
            "agents": [
                {"name": "clerk", "model": {"provider": "scripted", "script": [{"text": answer}]}}
            ],
            "tasks": [{"title": "Answer", "description": "Answer.", "assignee": "clerk"}],
            "store": {"file": {"path": str(path)}, **extra.pop("store", {})},
            **extra,
        }
    )


async def _run(spec: RunSpec, run_id: str, tmp_path: Path) -> Any:
    return await run_spec(
        spec, run_id=run_id, tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )


async def test_equal_run_ids_of_two_tenants_are_two_runs(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    a = await _run(_spec(path, "A's secret", store={"tenant": "team-a"}), "pay", tmp_path)
    b = await _run(_spec(path, "B's answer", store={"tenant": "team-b"}), "pay", tmp_path)
    assert not a.resumed and not b.resumed  # B did not find A's checkpoint
    assert b.result.tasks[0].result == "B's answer"
    keys = [entry.key for entry in await FileStore(path).list()]
    assert any(k.startswith("__oma_tenant__/team-a/__oma_checkpoint__/pay/") for k in keys)
    assert any(k.startswith("__oma_tenant__/team-b/__oma_checkpoint__/pay/") for k in keys)
    assert not any(k.startswith("__oma_checkpoint__/") for k in keys)
    again = await _run(_spec(path, "never asked", store={"tenant": "team-a"}), "pay", tmp_path)
    assert again.resumed and again.result.tasks[0].result == "A's secret"


async def test_shared_memory_is_the_runs_own(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    await _run(_spec(path, "A's secret", sharedMemory=True), "run-a", tmp_path)
    await _run(_spec(path, "B's answer", sharedMemory=True), "run-b", tmp_path)
    entries = {e.key: e.value for e in await FileStore(path).list()}
    a_memory = {k: v for k, v in entries.items() if k.startswith("__oma_memory__/run/run-a/")}
    b_memory = {k: v for k, v in entries.items() if k.startswith("__oma_memory__/run/run-b/")}
    assert any("A's secret" in v for v in a_memory.values())  # B's run left A's memory alone
    assert not any("A's secret" in v for v in b_memory.values())
    assert any("B's answer" in v for v in b_memory.values())
    assert not [k for k in entries if k.startswith("clerk/")]  # nothing in the whole store
    # The memory is kept in the store, beside the checkpoint: snapshots do not carry it again.
    snapshot = json.loads(entries["__oma_checkpoint__/run-a/latest"])
    assert "sharedMemory" not in snapshot and snapshot["turnCount"] == 1


async def test_a_named_scope_is_shared_by_the_runs_that_name_it(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    scope = {"sharedMemory": True, "sharedMemoryScope": "invoices"}
    await _run(_spec(path, "first", **scope), "run-a", tmp_path)
    await _run(_spec(path, "second", **scope), "run-b", tmp_path)
    entries = {e.key: e.value for e in await FileStore(path).list()}
    shared = [v for k, v in entries.items() if k.startswith("__oma_memory__/scope/invoices/")]
    assert "first" in shared and "second" in shared


def test_the_cli_reads_a_tenants_part_with_tenant(tmp_path: Path) -> None:
    import asyncio

    from typer.testing import CliRunner

    from oma.cli import app

    path = tmp_path / "shared.json"
    asyncio.run(_run(_spec(path, "done", store={"tenant": "team-a"}), "pay", tmp_path))
    runner = CliRunner()
    url = f"file://{path}"
    whole = runner.invoke(app, ["checkpoint", "show", "--run-id", "pay", "--store", url])
    assert whole.exit_code == 1 and "no checkpoint" in whole.output
    listed = runner.invoke(app, ["checkpoint", "list", "--store", url])
    assert "tenants with keys of their own (see them with --tenant): ['team-a']" in listed.output
    part = runner.invoke(
        app, ["checkpoint", "show", "--run-id", "pay", "--store", url, "--tenant", "team-a"]
    )
    assert part.exit_code == 0 and "run       pay" in part.output, part.output
    bad = runner.invoke(app, ["approvals", "list", "--store", url, "--tenant", "Team A"])
    assert bad.exit_code == 2 and "is not a Kubernetes namespace name" in bad.output
    none = runner.invoke(app, ["approvals", "list", "--store", url, "--tenant", "team-a"])
    assert none.exit_code == 0 and "no approval requests" in none.output


async def test_equal_run_ids_of_two_tenants_get_different_task_ids(tmp_path: Path) -> None:
    """Task ids are in the idempotency keys of tool calls: two tenants' runs with one run id
    must not share them, or one tenant's payment would be taken for the other's."""
    path = tmp_path / "shared.json"
    a = await _run(_spec(path, "a", store={"tenant": "team-a"}), "pay", tmp_path)
    b = await _run(_spec(path, "b", store={"tenant": "team-b"}), "pay", tmp_path)
    again = await _run(
        _spec(tmp_path / "other.json", "a", store={"tenant": "team-a"}), "pay", tmp_path
    )
    assert a.result.tasks[0].id != b.result.tasks[0].id
    assert a.result.tasks[0].id == again.result.tasks[0].id  # derived, not drawn
