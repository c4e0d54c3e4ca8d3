"""Each recovery case of mid-task tool recovery, with a crash at the exact boundary."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oma.checkpoint import Checkpoint
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import (
    CheckpointConfigError,
    CheckpointOptions,
    OpenMultiAgent,
    RunIdConflictError,
)
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import AnyTool, ToolContext, define_tool
from tests.engine.crashing import CrashingStore, SimulatedCrash, call_committed, phase_is
from tests.engine.helpers import Events, LabelInput, ToolLog, wait_until

RUN = "recovery-run"


def _charge_tool(
    log: ToolLog,
    *,
    crash_after_effect: set[str] | None = None,
    first: dict[str, Callable[[], Awaitable[None]]] | None = None,
) -> AnyTool:
    """``first``: what a call waits for before its effect (by call id)."""

    async def charge(args: LabelInput, ctx: ToolContext) -> str:
        wait = (first or {}).get(ctx.tool_call_id)
        if wait is not None:
            await wait()
        log.calls.append((ctx.tool_call_id, ctx.task_id or "", {"label": args.label}))
        if ctx.tool_call_id in (crash_after_effect or set()):
            crash_after_effect.discard(ctx.tool_call_id)  # type: ignore[union-attr]
            raise SimulatedCrash("killed after the side effect, before its commit")
        return f"charged:{args.label}"

    return define_tool("charge", "Charge.", LabelInput, charge)


def _script(*turns: Any) -> ScriptedAdapter:
    return ScriptedAdapter(list(turns))


def _calls(*ids: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": "charge", "input": {"label": i}} for i in ids]}


def _team(model: ScriptedAdapter, tool: AnyTool, *, max_turns: int = 10) -> Team:
    return Team(
        name="t",
        agents=[AgentConfig(name="worker", adapter=model, tools=[tool], max_turns=max_turns)],
    )


TASKS = [{"title": "Pay", "description": "Pay the invoice.", "assignee": "worker"}]


async def _crash(store: CrashingStore, team: Team, tasks: list[dict[str, Any]] = TASKS) -> None:
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(
            team, tasks, checkpoint=CheckpointOptions(journal=False, store=store, run_id=RUN)
        )


async def _restore(store: CrashingStore, team: Team) -> Any:
    return await OpenMultiAgent().restore(
        team, checkpoint=CheckpointOptions(journal=False, store=store, run_id=RUN)
    )


async def test_crash_after_commit_replays_the_result_without_rerunning() -> None:
    store, log = CrashingStore(), ToolLog()
    store.crash_before = phase_is("awaiting_model")  # c1 committed, next boundary never lands
    await _crash(store, _team(_script(_calls("c1"), {"text": "paid"}), _charge_tool(log)))
    assert log.ids() == ["c1"]
    model = _script(_calls("c1"), {"text": "paid"})
    result = await _restore(store, _team(model, _charge_tool(log)))
    assert result.success and log.ids() == ["c1"]
    (call,) = model.calls
    last = call.messages[-1].to_wire()
    assert last == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "charged:c1", "is_error": False}
        ],
    }


async def test_crash_before_commit_reruns_once_with_the_same_call_id() -> None:
    store, log = CrashingStore(), ToolLog()
    await _crash(
        store,
        _team(
            _script(_calls("c1"), {"text": "paid"}), _charge_tool(log, crash_after_effect={"c1"})
        ),
    )
    result = await _restore(
        store, _team(_script(_calls("c1"), {"text": "paid"}), _charge_tool(log))
    )
    assert result.success
    assert log.ids() == ["c1", "c1"]  # the same idempotency key both times
    assert log.calls[0][1] == log.calls[1][1]  # and the same task id


async def test_parallel_calls_with_one_committed_run_only_the_other() -> None:
    store, log = CrashingStore(), ToolLog()
    store.crash_before = call_committed("c2")

    async def c1_committed() -> None:  # c2 ends second: its commit is the one that never lands
        written = store.checkpoint_writes
        await wait_until(lambda: any(call_committed("c1")(s) for s in written), "c1's commit")

    tool = _charge_tool(log, first={"c2": c1_committed})
    await _crash(store, _team(_script(_calls("c1", "c2"), {"text": "paid"}), tool))
    assert log.ids() == ["c1", "c2"]  # c2's effect happened, its commit never landed
    result = await _restore(
        store, _team(_script(_calls("c1", "c2"), {"text": "paid"}), _charge_tool(log))
    )
    assert result.success and log.ids() == ["c1", "c2", "c2"]
    (task_result,) = result.task_results.values()
    assert [r.output for r in task_result.tool_calls] == ["charged:c1", "charged:c2"]


async def test_committed_error_results_are_replayed_too() -> None:
    store, log = CrashingStore(), ToolLog()
    store.crash_before = phase_is("awaiting_model")
    bad = {"tool_calls": [{"id": "c1", "name": "charge", "input": {"wrong": 1}}]}
    await _crash(store, _team(_script(bad, {"text": "gave up"}), _charge_tool(log)))
    model = _script(bad, {"text": "gave up"})
    result = await _restore(store, _team(model, _charge_tool(log)))
    assert result.success and log.calls == []
    replayed = model.calls[0].messages[-1].content[0].model_dump()
    assert replayed["is_error"] is True and "Invalid input" in replayed["content"]


async def test_completed_tasks_never_rerun_and_second_restore_does_nothing() -> None:
    store, log = CrashingStore(), ToolLog()
    tasks: list[dict[str, Any]] = [
        *TASKS,
        {
            "title": "Notify",
            "description": "Tell them.",
            "assignee": "worker",
            "dependsOn": ["Pay"],
        },
    ]
    script = {
        "# Task: Pay": [_calls("c1"), {"text": "paid"}],
        "# Task: Notify": [{"text": "notified", "delay": 0.01}],
    }
    # Notify's answer arrives after Pay completed, and is never persisted.
    store.crash_before = lambda s: phase_is("completed")(s) and len(s["queue"]["completed"]) == 1
    team = _team(ScriptedAdapter(script), _charge_tool(log))
    await _crash(store, team, tasks)
    model = ScriptedAdapter(script)
    result = await _restore(store, _team(model, _charge_tool(log)))
    assert result.success and log.ids() == ["c1"]
    assert [c.messages[0].text.splitlines()[0] for c in model.calls] == ["# Task: Notify"]
    assert result.identity.attempt == 2
    again_model = ScriptedAdapter(script)
    writes = len(store.checkpoint_writes)
    again = await _restore(store, _team(again_model, _charge_tool(log)))
    assert again.success and again_model.calls == [] and log.ids() == ["c1"]
    assert again.identity.attempt == 3 and len(store.checkpoint_writes) == writes + 1
    assert [r.output for r in again.task_results.values()] == ["paid", "notified"]


async def test_turns_and_usage_carry_over_so_max_turns_does_not_restart() -> None:
    store, log = CrashingStore(), ToolLog()
    store.crash_before = call_committed("c2")
    script = [_calls("c1"), _calls("c2"), {"text": "never reached"}]
    await _crash(store, _team(_script(*script), _charge_tool(log), max_turns=2))
    model = _script(*script)
    result = await _restore(store, _team(model, _charge_tool(log), max_turns=2))
    assert model.calls == []  # two turns were used before the crash: the limit holds
    (task_result,) = result.task_results.values()
    assert (task_result.token_usage.input_tokens, task_result.token_usage.output_tokens) == (2, 2)
    assert log.ids() == ["c1", "c2", "c2"]


async def test_transient_save_failure_is_reported_and_the_run_continues() -> None:
    store, log, events = CrashingStore(), ToolLog(), Events()
    store.fail_next_writes = 1
    result = await OpenMultiAgent(on_progress=events).run_tasks(
        _team(_script(_calls("c1"), {"text": "paid"}), _charge_tool(log)),
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id=RUN),
    )
    assert result.success and events.kinds() == ["checkpoint_save_failed"]
    saved = await Checkpoint(store, run_id=RUN).load_latest()
    assert saved is not None and saved.queue.completed == [result.tasks[0].id]


async def test_no_store_and_no_run_id_refuses_before_any_model_call() -> None:
    model, log = _script({"text": "never"}), ToolLog()
    with pytest.raises(CheckpointConfigError, match="runId"):
        await OpenMultiAgent(checkpoint=True).run_tasks(_team(model, _charge_tool(log)), TASKS)
    assert model.calls == []


async def test_conflicting_run_ids_refuse_before_any_model_call() -> None:
    model, log = _script({"text": "never"}), ToolLog()
    with pytest.raises(RunIdConflictError, match="runId conflict"):
        await OpenMultiAgent().run_tasks(
            _team(model, _charge_tool(log)),
            TASKS,
            run_id="a",
            checkpoint=CheckpointOptions(journal=False, store=InMemoryStore(), run_id="b"),
        )
    assert model.calls == []


async def test_restore_on_an_empty_store_runs_fresh_and_resume_only_is_a_no_op() -> None:
    store, log = CrashingStore(), ToolLog()
    model = _script(_calls("c1"), {"text": "paid"})
    fresh = await OpenMultiAgent().restore(
        _team(model, _charge_tool(log)),
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id=RUN),
    )
    assert fresh.success and fresh.identity.attempt == 1 and log.ids() == ["c1"]
    empty = CrashingStore()
    nothing = await OpenMultiAgent().restore(
        _team(model, _charge_tool(log)),
        checkpoint=CheckpointOptions(journal=False, store=empty, run_id=RUN),
    )
    assert nothing.success and nothing.tasks == [] and await empty.list() == []
