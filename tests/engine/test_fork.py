"""Forking a run at a past boundary: real runs, a counting tool, approvals through the ledger.

The parent runs to the end once; then a child is forked at every one of its boundaries and
resumed to the end. A call the parent had committed by that boundary never runs again; every
call after it runs once, with the child's run id in its idempotency key; the parent's stored
bytes never change. A patched tool input under an approval gate is asked again, with the new
content and hash.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from oma.approval import ApprovalRequest, decide_approval
from oma.approval.gates import Suspend
from oma.checkpoint import Checkpoint
from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.fork import ForkError, fork_run
from oma.checkpoint.history import read_history
from oma.checkpoint.keys import checkpoint_key
from oma.errors import CheckpointHistoryError, CheckpointValidationError
from oma.llm.scripted import ScriptedAdapter
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore, PrefixedStore, tenant_prefix
from oma.store.base import MemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool, idempotency_key

PARENT = "parent"
CALLS = 16


class AddInput(BaseModel):
    amount: int


class Counter:
    """The side effect: every execution, by idempotency key."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, int]] = []

    async def add(self, args: AddInput, ctx: ToolContext) -> str:
        self.executed.append((idempotency_key(ctx), args.amount))
        return f"added {args.amount}"


class TurnModel:
    """Answers turn n (the assistant messages already in the conversation) from the script,
    so a resumed or forked run gets the turn it is at, whatever came before in this process."""

    name = "turns"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    async def chat(self, request: ChatRequest) -> ChatResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn >= self.calls:
            return ChatResponse.model_validate(
                {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}
            )
        use = {"type": "tool_use", "id": f"c{turn}", "name": "add", "input": {"amount": turn}}
        return ChatResponse.model_validate({"content": [use], "stop_reason": "tool_use"})


def _team(counter: Counter) -> Team:
    add = define_tool("add", "Add an amount (once per idempotency key).", AddInput, counter.add)
    worker = AgentConfig(name="worker", adapter=TurnModel(CALLS), max_turns=50, tools=[add])
    return Team(name="fork", agents=[worker])


async def _approve(store: MemoryStore, request: ApprovalRequest, reviewer: str) -> None:
    await decide_approval(
        store,
        request_id=request.id,
        request_hash=request.request_hash,
        decision="approve",
        reviewer={"id": reviewer},
    )


def _options(store: MemoryStore, run_id: str) -> CheckpointOptions:
    return CheckpointOptions(store=store, run_id=run_id, fence=True, journal=True)


def _committed(document: dict[str, Any]) -> set[str]:
    """The tool calls whose results the snapshot holds: done, never to run again."""
    done: set[str] = set()
    for task in document.get("inFlightTasks") or []:
        for message in task.get("conversationMessages") or []:
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    done.add(block["tool_use_id"])
        for call in task.get("pendingToolCalls") or []:
            if "commit" in call:
                done.add(call["call"]["id"])
    if any(t.get("status") == "completed" for t in document["queue"]["tasks"]):
        done |= {f"c{n}" for n in range(CALLS)}
    return done


async def test_a_fork_at_every_boundary_replays_what_was_committed_and_keys_the_rest_its_own() -> (
    None
):
    store, counter = InMemoryStore(), Counter()
    parent = await OpenMultiAgent().run_tasks(
        _team(counter), [{"title": "Add", "description": "add"}], checkpoint=_options(store, PARENT)
    )
    assert parent.success and len(counter.executed) == CALLS
    history = await read_history(store, checkpoint_key(PARENT))
    assert history is not None
    boundaries = history.boundaries()
    assert len(boundaries) >= 48  # three per call, and the task's start and end
    parent_bytes = await store.journal_get(checkpoint_key(PARENT), history=True)
    for boundary in boundaries:
        k = boundary.seq
        done_at_k = _committed(history.rebuild(k))
        child = f"child-{k}"
        counter.executed.clear()
        forked = await fork_run(store, PARENT, k, child=child)
        assert forked.child == child and forked.asked_again == []
        result = await OpenMultiAgent().restore(_team(counter), checkpoint=_options(store, child))
        assert result.success, (k, result.status)
        keys = [key for key, _ in counter.executed]
        calls = [key.rsplit(":", 1)[1] for key in keys]
        assert sorted(calls) == sorted(f"c{n}" for n in range(CALLS) if f"c{n}" not in done_at_k)
        assert all(key.startswith(f"{child}:") for key in keys), (k, keys)
        assert len(set(keys)) == len(keys)
    assert await store.journal_get(checkpoint_key(PARENT), history=True) == parent_bytes
    parent_log = await load_attempt_log(store, checkpoint_key(PARENT))
    assert parent_log is not None and parent_log.forks is not None
    assert [f.seq for f in parent_log.forks] == [b.seq for b in boundaries]
    child_log = await load_attempt_log(store, checkpoint_key("child-3"))
    assert child_log is not None and child_log.forked_from is not None
    assert (child_log.forked_from.run_id, child_log.forked_from.seq) == (PARENT, 3)
    child_history = await read_history(store, checkpoint_key("child-3"))
    assert child_history is not None
    assert child_history.boundaries()[0].what == f"forked from {PARENT} at boundary 3"


async def test_a_patched_tool_input_under_a_gate_is_asked_again_with_its_new_content() -> None:
    store, counter = InMemoryStore(), Counter()
    gate = OpenMultiAgent(on_tool_call=lambda ctx: Suspend("review"))
    suspended = await gate.run_tasks(
        _team(counter), [{"title": "Add", "description": "add"}], checkpoint=_options(store, PARENT)
    )
    assert suspended.status.code == "suspended" and counter.executed == []
    (asked,) = suspended.pending_approvals
    assert asked.content["input"] == {"amount": 0}
    history = await read_history(store, checkpoint_key(PARENT))
    assert history is not None
    seq = history.boundaries()[-1].seq  # where the run waits for the decision
    pointer = "/inFlightTasks/0/pendingToolCalls/0/call/input/amount"
    patch = [{"op": "replace", "path": pointer, "value": 500}]
    forked = await fork_run(store, PARENT, seq, child="patched", patch=patch)
    assert forked.asked_again == [asked.id] and forked.patched
    # the parent's decision (approve 0) does not carry over to the child's new content
    await _approve(store, asked, "alice")
    child = await gate.restore(_team(counter), checkpoint=_options(store, "patched"))
    assert child.status.code == "suspended" and counter.executed == []
    (again,) = child.pending_approvals
    assert again.run_id == "patched" and again.content["input"] == {"amount": 500}
    assert again.request_hash != asked.request_hash and again.id != asked.id
    await _approve(store, again, "bob")
    went_on = await gate.restore(_team(counter), checkpoint=_options(store, "patched"))
    assert went_on.status.code == "suspended"  # the next call asks in its turn
    ((key, amount),) = counter.executed  # the patched call, run once, as the child
    assert key.startswith("patched:") and key.endswith(":c0") and amount == 500


async def test_a_fork_refuses_what_it_cannot_do_and_writes_nothing() -> None:
    store, counter = InMemoryStore(), Counter()
    await OpenMultiAgent().run_tasks(
        _team(counter), [{"title": "Add", "description": "add"}], checkpoint=_options(store, PARENT)
    )
    before = await store.journal_keys()
    with pytest.raises(ForkError, match="touches '/identity/runId'"):
        await fork_run(
            store,
            PARENT,
            2,
            child="x",
            patch=[{"op": "replace", "path": "/identity/runId", "value": "y"}],
        )
    with pytest.raises(ForkError, match="approvals are asked again"):
        await fork_run(
            store, PARENT, 2, child="x", patch=[{"op": "remove", "path": "/approvalDecisions"}]
        )
    with pytest.raises(ForkError, match="does not apply"):
        await fork_run(store, PARENT, 2, child="x", patch=[{"op": "remove", "path": "/nope/0"}])
    with pytest.raises(CheckpointValidationError):
        await fork_run(
            store, PARENT, 2, child="x", patch=[{"op": "replace", "path": "/queue", "value": 3}]
        )
    with pytest.raises(ForkError, match="a run id of its own"):
        await fork_run(store, PARENT, 2, child=PARENT)
    with pytest.raises(CheckpointHistoryError, match="boundary 999 is not kept"):
        await fork_run(store, PARENT, 999, child="x")
    with pytest.raises(CheckpointHistoryError, match='no checkpoint for run "ghost"'):
        await fork_run(store, "ghost", 1, child="x")
    assert await store.journal_keys() == before
    await fork_run(store, PARENT, 2, child="taken")
    with pytest.raises(ForkError, match="already has a checkpoint"):
        await fork_run(store, PARENT, 3, child="taken")
    latest = await Checkpoint(store, run_id="taken").load_latest()
    assert latest is not None


async def test_a_tenant_cannot_fork_another_tenant_s_run() -> None:
    """A TeamRun's runner sees its namespace's part of the store only: a fork naming a run of
    another namespace finds nothing there, and writes nothing anywhere."""
    whole, counter = InMemoryStore(), Counter()
    mine = PrefixedStore(whole, tenant_prefix("team-a"))
    theirs = PrefixedStore(whole, tenant_prefix("team-b"))
    await OpenMultiAgent().run_tasks(
        _team(counter), [{"title": "Add", "description": "add"}], checkpoint=_options(mine, PARENT)
    )
    keys = await whole.journal_keys()
    with pytest.raises(CheckpointHistoryError, match=f'no checkpoint for run "{PARENT}"'):
        await fork_run(theirs, PARENT, 2, child="stolen")
    assert await whole.journal_keys() == keys


async def test_a_run_whose_approvals_were_decided_forks_at_every_boundary_and_asks_again() -> None:
    """Decisions do not cross runs: a fork at any boundary, before or after the parent's
    reviewer approved call c1, carries none; a child that reaches c1 unrun asks its own."""
    store, counter = InMemoryStore(), Counter()
    gate = OpenMultiAgent(
        on_tool_call=lambda ctx: Suspend("review") if ctx.tool_call_id == "c1" else True
    )
    tasks = [{"title": "Add", "description": "add"}]
    suspended = await gate.run_tasks(_team(counter), tasks, checkpoint=_options(store, PARENT))
    (asked,) = suspended.pending_approvals
    await _approve(store, asked, "alice")
    done = await gate.restore(_team(counter), checkpoint=_options(store, PARENT))
    assert done.success and len(counter.executed) == CALLS
    history = await read_history(store, checkpoint_key(PARENT))
    assert history is not None
    for boundary in history.boundaries():
        k, child = boundary.seq, f"d-{boundary.seq}"
        done_at_k = _committed(history.rebuild(k))
        counter.executed.clear()
        await fork_run(store, PARENT, k, child=child)
        result = await gate.restore(_team(counter), checkpoint=_options(store, child))
        if "c1" not in done_at_k:
            assert result.status.code == "suspended", (k, result.status)
            (own,) = result.pending_approvals
            assert own.run_id == child and own.id != asked.id
            await _approve(store, own, "bob")
            result = await gate.restore(_team(counter), checkpoint=_options(store, child))
        assert result.success, (k, result.status)
        calls = sorted(key.rsplit(":", 1)[1] for key, _ in counter.executed)
        assert calls == sorted(f"c{n}" for n in range(CALLS) if f"c{n}" not in done_at_k), k


async def test_a_patch_of_the_whole_document_is_refused() -> None:
    store, counter = InMemoryStore(), Counter()
    await OpenMultiAgent().run_tasks(
        _team(counter), [{"title": "Add", "description": "add"}], checkpoint=_options(store, PARENT)
    )
    snapshot = (await read_history(store, checkpoint_key(PARENT))).rebuild(2)  # type: ignore[union-attr]
    whole = {**snapshot, "identity": {**snapshot["identity"], "attempt": 7}}
    for op in (
        {"op": "replace", "path": "", "value": whole},
        {"op": "copy", "from": "", "path": "/x"},
    ):
        with pytest.raises(ForkError, match="touches ''"):
            await fork_run(store, PARENT, 2, child="x", patch=[op])


async def test_a_boundary_waiting_on_a_round_approval_is_not_forked() -> None:
    """A resumed run does not come back to a round gate: a child of that boundary would run
    the round nobody approved for it. The fork is refused, and the boundary before works."""

    def team() -> Team:
        model = ScriptedAdapter(
            {"# Task: One": [{"text": "one done"}], "# Task: Two": [{"text": "two done"}]}
        )
        return Team(name="s", agents=[AgentConfig(name="w", adapter=model)])

    store = InMemoryStore()
    rounds: list[dict[str, Any]] = [
        {"title": "One", "description": "1"},
        {"title": "Two", "description": "2", "dependsOn": ["One"]},
    ]
    gate = OpenMultiAgent(on_approval=lambda done, upcoming: Suspend("round review"))
    waiting = await gate.run_tasks(team(), rounds, checkpoint=_options(store, PARENT))
    (asked,) = waiting.pending_approvals
    assert asked.scope == "task_round"
    history = await read_history(store, checkpoint_key(PARENT))
    assert history is not None
    last = history.boundaries()[-1].seq
    with pytest.raises(ForkError, match=f"boundary {last} of {PARENT} waits on a task_round"):
        await fork_run(store, PARENT, last, child="skips-the-gate")
    assert await Checkpoint(store, run_id="skips-the-gate").load_latest() is None
