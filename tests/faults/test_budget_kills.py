"""The crash kit on a run with a token budget: a run process (``oma run``'s ``run_spec``)
against a model server that bills (the real Anthropic SDK, a loopback server speaking its wire
format), SIGKILLed before and after every store write of the run (every durable boundary), then
run again until it ends, a reviewer approving each raise of the budget it asks for. Whatever
the kill:

- what the server billed never passes the run's budget (as raised) plus one call's maxTokens,
  checked after every invocation;
- the run's spend is the server's count: each call it settled is counted exactly as billed,
  and each call a crash hid is named in the checkpoint (its key is the one the server saw, if
  the call reached it) and counted at its reservation, never below what it was billed;
- every call the server saw is one the run counted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oma.approval import decide_approval
from oma.budget import BudgetState
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.local_run import run_spec
from oma.pod_contract import Exit
from oma.spec import RunSpec
from oma.store import FileStore
from oma.store.faults import KILL_ENV, LOG_ENV
from oma.tools.builtin import builtin_tools
from tests.servers.billing_model import BillingModelServer

TOOL_TURNS = 3  # four model calls: three with a tool call, then the answer
MAX_TOKENS = 64
MAX_INVOCATIONS = 12


@pytest.fixture
def model() -> Iterator[BillingModelServer]:
    with BillingModelServer(TOOL_TURNS) as server:
        yield server


def _spec(model: BillingModelServer, tokens: int, store: Path) -> dict[str, Any]:
    agent = {
        "name": "clerk",
        "tools": ["echo"],
        "model": {
            "provider": "anthropic",
            "name": "claude-billing-1",
            "baseURL": model.base_url,
            "apiKeyEnv": "BILLING_MODEL_KEY",
            "maxRetries": 0,
            "maxTokens": MAX_TOKENS,
        },
    }
    return {
        "agents": [agent],
        "tasks": [{"title": "Steps", "description": "Do the three steps."}],
        "budget": {"tokens": tokens},
        "store": {"file": {"path": str(store)}},
    }


# What `oma run` does (oma.local_run.run_spec) in a child process forked from one that has
# imported oma and the SDK already: a run's invocations take a fraction of a second each.
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["oma.local_run", "anthropic"])


def _child(spec: dict[str, Any], run_id: str, env: dict[str, str]) -> None:
    code = 70
    try:
        for name in (KILL_ENV, LOG_ENV):
            os.environ.pop(name, None)
        os.environ.update(env)
        code = int(asyncio.run(_run_once(spec, run_id)))
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


async def _run_once(spec: dict[str, Any], run_id: str) -> int:
    run = await run_spec(
        RunSpec.model_validate(spec),
        run_id=run_id,
        tools=builtin_tools(),
        default_store_path=Path(spec["store"]["file"]["path"]),
    )
    return run.exit_code


def _oma_run(spec: dict[str, Any], run_id: str, **env: str) -> int:
    child = _FORKS.Process(
        target=_child,
        args=(spec, run_id, {"BILLING_MODEL_KEY": "sk-billing-000000000000", **env}),
        daemon=True,
    )
    child.start()
    child.join(timeout=120)
    if child.exitcode is None:
        child.kill()
        child.join()
    code = child.exitcode
    assert code not in (None, Exit.PERMANENT, 70), (run_id, code)
    return int(code)


async def _snapshot(work: Path, run_id: str) -> CheckpointSnapshotV4 | None:
    """None: killed before its first save."""
    store = FileStore(str(work / f"{run_id}.json"))
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    assert snapshot is None or isinstance(snapshot, CheckpointSnapshotV4)
    return snapshot


async def _approve_raises(work: Path, run_id: str) -> int:
    """Approve the budget raises the run waits for; how many there were."""
    snapshot = await _snapshot(work, run_id)
    assert snapshot is not None
    store = FileStore(str(work / f"{run_id}.json"))
    raises = [r for r in snapshot.pending_approvals if r.scope == "budget"]
    assert len(raises) == len(snapshot.pending_approvals), "only budget raises are asked for"
    for request in raises:
        await decide_approval(
            store,
            request_id=request.id,
            request_hash=request.request_hash,
            decision="approve",
            reviewer={"id": "finance"},
        )
    return len(raises)


def _limit(budget: BudgetState, tokens: int) -> int:
    return tokens + budget.raised.tokens


def _check_spend(model: BillingModelServer, run_id: str, budget: BudgetState) -> dict[str, Any]:
    """The run's count against the server's bills (the module's second and third points)."""
    bills = {bill.call_key: bill for bill in model.bills(run_id)}
    assert len(bills) == len(model.bills(run_id)), "a call key was sent twice"
    lost = {f"{run_id}:{r.task_id}:{r.id}": r for r in budget.lost}
    for key, reservation in lost.items():
        billed = bills[key].tokens if key in bills else 0
        assert billed <= reservation.tokens, (key, billed, reservation.tokens)
    settled = [bill for key, bill in bills.items() if key not in lost]
    spent = budget.spent
    assert spent.input_tokens == sum(b.input_tokens for b in settled)
    assert spent.output_tokens == sum(b.output_tokens for b in settled)
    assert spent.lost_tokens == sum(r.tokens for r in lost.values())
    assert spent.model_calls == len(settled) + len(lost) == spent.lost_model_calls + len(settled)
    return {"lost": len(lost), "lost_billed": sum(k in bills for k in lost)}


@pytest.mark.crash
@pytest.mark.timeout(900)
async def test_a_budget_holds_and_counts_every_billed_call_whatever_the_kill(
    model: BillingModelServer, tmp_path: Path
) -> None:
    writes = tmp_path / "writes.jsonl"
    clean_spec = _spec(model, 1_000_000, tmp_path / "clean.json")
    assert _oma_run(clean_spec, "clean", OMA_FAULT_LOG=str(writes)) == Exit.OK
    boundaries = len(writes.read_text().splitlines())
    clean = sum(bill.tokens for bill in model.bills("clean"))
    assert len(model.bills("clean")) == TOOL_TURNS + 1
    # Enough for the clean run, so what a kill loses is what makes the run ask for more.
    tokens = clean + 2 * MAX_TOKENS

    kills = raises = lost = lost_billed = 0
    for n in range(1, boundaries + 1):
        for when in ("before", "after"):
            run_id = f"k{n}-{when}"
            spec = _spec(model, tokens, tmp_path / f"{run_id}.json")
            code = _oma_run(spec, run_id, OMA_FAULT_KILL_AT=f"{n}:{when}")
            kills += code == -9
            for _ in range(MAX_INVOCATIONS):
                snapshot = await _snapshot(tmp_path, run_id)
                budget = (snapshot.budget if snapshot else None) or BudgetState()
                billed = sum(bill.tokens for bill in model.bills(run_id))
                assert billed <= _limit(budget, tokens) + MAX_TOKENS, (run_id, billed)
                if code == Exit.OK:
                    break
                if code == Exit.SUSPENDED:
                    raises += await _approve_raises(tmp_path, run_id)
                code = _oma_run(spec, run_id)
            assert code == Exit.OK, (run_id, code)
            found = _check_spend(model, run_id, budget)
            lost += found["lost"]
            lost_billed += found["lost_billed"]
    print(f"\n{boundaries} boundaries, {kills} kills, {lost} lost calls ({lost_billed} billed), "
          f"{raises} raises approved")  # fmt: skip
    assert boundaries >= 10 and kills >= 2 * boundaries - 2, (boundaries, kills)
    assert lost >= 2 and lost_billed >= 1  # kills during a call, before and after it was sent
    assert raises >= 1  # a lost call's reservation made the run ask for more
