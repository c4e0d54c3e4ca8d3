"""How each attempt of an ``oma run`` (and a runner pod) ended, in the run's attempt log and in
``oma checkpoint show``: the outcome and its error, the tool calls it ran and replayed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma.checkpoint.attempts import load_attempt_log
from oma.cli import app
from oma.errors import CheckpointFencedError
from oma.local_run import run_spec
from oma.store import FileStore
from tests.engine.crashing import SimulatedCrash
from tests.engine.helpers import die_in_e3_once_e1_e2_committed
from tests.engine.helpers import effect_spec as _spec
from tests.engine.helpers import effect_tool as _effect

KEY = "__oma_checkpoint__/{}/latest"


async def _show(run_id: str, store: Path, *json_flag: str) -> str:
    """``oma checkpoint show`` (the CLI runs its own event loop: off this test's loop)."""
    args = ["checkpoint", "show", "--run-id", run_id, "--store", f"file://{store}", *json_flag]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    return result.output


THREE_CALLS: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"id": f"e{n}", "name": "effect", "input": {"label": f"n{n}"}} for n in (1, 2, 3)
        ]
    },
    {"text": "paid"},
]


async def test_a_resumed_attempt_counts_the_calls_it_replayed(tmp_path: Path) -> None:
    """Attempt 1 dies (a simulated SIGKILL inside the third call) once the first two calls of
    the turn are committed: it has no end. Attempt 2 replays those two and runs the third; its
    end says so (its start record, taken when it claimed the run, cannot know it yet)."""
    store, ran = tmp_path / "store.json", list[str]()

    die_in_the_third = die_in_e3_once_e1_e2_committed(store)

    with pytest.raises(SimulatedCrash):
        await run_spec(
            _spec(THREE_CALLS),
            run_id="resumed",
            tools={"effect": _effect(ran, die_in_the_third)},
            default_store_path=store,
        )
    assert sorted(ran) == ["e1", "e2", "e3"]
    second = await run_spec(
        _spec(THREE_CALLS),
        run_id="resumed",
        tools={"effect": _effect(ran)},
        default_store_path=store,
    )
    assert second.result.success and sorted(ran[3:]) == ["e3"]  # e1, e2 replayed, not run

    log = await load_attempt_log(FileStore(store), KEY.format("resumed"))
    assert log is not None
    ends = [(a.outcome, a.executed_tool_calls, a.replayed_tool_calls) for a in log.attempts]
    assert ends == [(None, None, None), ("ok", 1, 2)]
    out = await _show("resumed", store)
    assert "status    succeeded  (attempt 2, ended " in out
    assert out.count("; no end recorded") == 1  # attempt 1
    assert ": succeeded (1 tool calls executed, 2 replayed)" in out
    document = json.loads(await _show("resumed", store, "--json"))
    assert document["lastAttempt"]["attempt"] == 2 and document["lastAttempt"]["outcome"] == "ok"
    assert document["attempts"][1]["replayedToolCalls"] == 2
    # One trace for the run, the first attempt's (each attempt also has its own id).
    assert document["traceId"] == log.attempts[0].trace_id != log.attempts[1].trace_id
    assert f"trace     {log.attempts[0].trace_id}  (every attempt's spans)" in out


async def test_a_failed_run_says_which_task_failed_and_why(tmp_path: Path) -> None:
    """The checkpoint keeps a failed task pending (to run again); the attempt's end carries the
    error that the checkpoint alone cannot show."""
    store, ran = tmp_path / "store.json", list[str]()
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "e1", "name": "effect", "input": {"label": "x"}}]}
    ]
    failed = await run_spec(
        _spec(script), run_id="failing", tools={"effect": _effect(ran)}, default_store_path=store
    )
    assert failed.result.status.code == "error"
    out = await _show("failing", store)
    status = next(line for line in out.splitlines() if line.startswith("status"))
    assert status.startswith("status    error: 1 task(s) failed. Pay: scripted model: script")
    assert "turn 2 was requested  (attempt 1, ended " in status
    assert (
        ": error: 1 task(s) failed. Pay: " in out and "(1 tool calls executed, 0 replayed)" in out
    )
    assert (
        "earlier turns: 1 tool calls done (effect x1): in the conversation, never run again" in out
    )
    document = json.loads(await _show("failing", store, "--json"))
    (in_flight,) = document["inFlight"]
    assert in_flight["earlierToolCalls"] == ["effect"]
    assert document["lastAttempt"]["outcome"] == "error"


async def test_an_attempt_that_lost_the_run_to_a_newer_one_ends_fenced(tmp_path: Path) -> None:
    """Attempt 1 is held inside a tool call while attempt 2 takes the run over and finishes;
    released, attempt 1's next save is refused, and its record says it was fenced."""
    store, ran = tmp_path / "store.json", list[str]()
    release, holding = asyncio.Event(), asyncio.Event()

    async def hold_first(call_id: str) -> None:
        if len(ran) == 1:  # attempt 1's call, not attempt 2's run of it again
            holding.set()
            await release.wait()

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "e1", "name": "effect", "input": {"label": "x"}}]},
        {"text": "paid"},
    ]
    spec = _spec(script)
    first = asyncio.create_task(
        run_spec(
            spec,
            run_id="taken",
            tools={"effect": _effect(ran, hold_first)},
            default_store_path=store,
        )
    )
    await asyncio.wait_for(holding.wait(), 10)
    second = await run_spec(
        spec, run_id="taken", tools={"effect": _effect(ran)}, default_store_path=store
    )
    assert second.result.success
    release.set()
    try:
        await asyncio.wait_for(first, 10)
    except CheckpointFencedError:
        pass
    else:
        raise AssertionError("attempt 1 went on after attempt 2 took the run over")
    log = await load_attempt_log(FileStore(store), KEY.format("taken"))
    assert log is not None
    assert [(a.attempt, a.outcome) for a in log.attempts] == [(1, "fenced"), (2, "ok")]
    assert "fenced (a newer attempt took the run over)" in await _show("taken", store)
