"""The benchmarks under ``bench/`` run and print their tables (tiny ``--quick`` runs, memory and
file stores only); and the incremental snapshot encoding they measure writes exactly the text
of the snapshot model. No assertion here is about time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from oma import jsonutil
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, saver, snapshot_build
from oma.orchestrator.context import RunContext
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.snapshot_build import build_snapshot
from oma.orchestrator.snapshot_wire import EncodedSnapshot
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.servers.fixtures import missing
from tests.servers.postgres_server import postgres_bin_dir
from tests.servers.redis_server import redis_binary

ROOT = Path(__file__).resolve().parents[2]
SIZE_BYTES = {"10 KB": 10_000, "100 KB": 100_000, "1 MB": 1_000_000}  # the saves' sizes


def _bench(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _rows(output: str, first_column: str) -> list[list[str]]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    return [line.split() for line in lines[start + 1 :] if line.strip()]


def test_engine_overhead_prints_its_table() -> None:
    output = _bench("engine_overhead.py", "--tasks", "10", "--per-run", "5")
    assert "ckpt/bound" in output
    rows = [row for row in _rows(output, "backend") if row[0] in ("memory", "file")]
    assert [row[0] for row in rows] == ["memory", "file"]
    for row in rows:
        assert row[3].endswith("x")  # on/off ratio measured in the same run
        assert int(row[7]) == 10 * 5 + 2  # five boundaries per task, one per finished run


def test_restore_cost_prints_its_table() -> None:
    output = _bench("restore_cost.py")
    assert "client = the client library's plain read of the same text + orjson.loads" in output
    rows = _rows(output, "backend")
    assert [(row[0], " ".join(row[1:3])) for row in rows] == [
        ("memory", "100 KB"),
        ("memory", "1 MB"),
        ("file", "100 KB"),
        ("file", "1 MB"),
    ]
    assert all(len(row) == 17 for row in rows)
    # load x and restore x: each p50 against the baseline's p50, measured in the same run
    assert all(row[14].endswith("x") and row[15].endswith("x") for row in rows)


def test_restore_cost_restores_a_journal_too() -> None:
    """The same document stored as a base and deltas (each run checks that the journal
    rebuilds it exactly and is bounded without a walk); the file store keeps no journals."""
    output = _bench("restore_cost.py", "--layout", "journal")
    assert "layout journal: a base and 20 deltas" in output
    rows = _rows(output, "backend")
    assert [(row[0], " ".join(row[1:3])) for row in rows if len(row) == 17] == [
        ("memory", "100 KB"),
        ("memory", "1 MB"),
    ]
    assert ["file", "(keeps", "no", "journals:", "snapshot", "layout", "only)"] in rows


def test_restore_cost_restores_the_journals_real_runs_leave() -> None:
    """A run of 100 and of 300 turns, stopped at its last turn with its task in flight: the
    bench restores what it left (asserting the resumed model gets every message)."""
    output = _bench("restore_cost.py", "--layout", "run", "--quick")
    assert "layout run: the journal a real run of N turns left" in output
    rows = [row for row in _rows(output, "backend") if row[0] == "memory"]
    assert [row[1] for row in rows] == ["100t", "300t"]
    assert all(len(row) == 16 and row[13].endswith("x") for row in rows)
    assert int(rows[1][15]) > int(rows[0][15])  # the longer run's final snapshot is larger


def test_history_cost_keeps_every_boundary_and_finds_each_flip() -> None:
    """A 30-turn run: every boundary rebuilt identical to its recorded save, each flipped byte
    named at its record, the history's bytes printed against the final snapshot's."""
    output = _bench("history_cost.py")
    row = next(line for line in output.splitlines() if line.startswith("memory"))
    rebuilt = re.search(r"rebuilt (\d+)/(\d+) identical (\d+)", row)
    flips = re.search(r"flips found exactly (\d+)/(\d+)", row)
    kept = re.search(r"kept +[\d.]+ KB \(([\d.]+)x\)", row)
    assert rebuilt and flips and kept, row
    assert rebuilt[1] == rebuilt[2] == rebuilt[3] and int(rebuilt[1]) > 30
    assert flips[1] == flips[2] and int(flips[2]) >= 40  # records, then segments
    assert 1.0 < float(kept[1]) < 4.0


def test_replay_cost_reproduces_a_recorded_run_and_names_an_edit() -> None:
    output = _bench("replay_cost.py")
    row = next(line for line in output.splitlines() if line.startswith("memory"))
    assert "reproduces yes" in row and "edited: boundary 1 /queue/tasks/0/description" in row
    assert re.search(r"recorded +[\d.]+ s +replay +[\d.]+ s \([\d.]+x\)", row), row


def test_checkpoint_overhead_measures_saves_against_the_clients_plain_write() -> None:
    output = _bench("checkpoint_overhead.py", "--parts", "saves", "--backends", "memory,file")
    assert "client = the client library's plain write of the same string" in output
    assert "write amplification" not in output  # the amplification part was left out
    rows = _rows(output, "backend")
    assert [(row[0], " ".join(row[1:3])) for row in rows] == [
        (backend, size) for backend in ("memory", "file") for size in ("10 KB", "100 KB", "1 MB")
    ]
    assert "x base = p50 save / p50 base" in output and "snapshot shape: conversation" in output
    for row in rows:
        assert len(row) == 18, row
        client, save, ratio = float(row[4]), float(row[8]), float(row[12].rstrip("x"))
        encode, floor = float(row[13]), float(row[14].rstrip("x"))
        base, base_ratio = float(row[16]), float(row[17].rstrip("x"))
        if client >= 0.05:  # the memory baseline rounds to 0.00 ms
            assert abs(save / client - ratio) <= 0.01 + 0.05 * ratio, row
            assert abs((encode + client) / client - floor) <= 0.01 + 0.05 * floor, row
        if base >= 0.05:
            assert abs(save / base - base_ratio) <= 0.01 + 0.05 * base_ratio, row


def test_checkpoint_overhead_saves_a_long_runs_snapshot_shape_too() -> None:
    output = _bench(
        "checkpoint_overhead.py", "--parts", "saves", "--backends", "memory", "--shape", "run"
    )
    assert "snapshot shape: run" in output
    rows = _rows(output, "backend")
    assert [" ".join(row[1:3]) for row in rows] == ["10 KB", "100 KB", "1 MB"]
    for row in rows:
        assert len(row) == 18 and 0.9 * SIZE_BYTES[" ".join(row[1:3])] <= int(row[3]), row


def test_boundary_save_pairs_each_save_with_the_clients_durable_write() -> None:
    if redis_binary() is None or postgres_bin_dir() is None:
        missing("redis-server and PostgreSQL")
    output = _bench("boundary_save.py")
    assert "appendfsync always" in output and "synchronous_commit" in output
    rows = _rows(output, "backend")
    assert [row[0] for row in rows] == ["redis", "postgres"]
    for row in rows:
        assert int(row[1]) == 100 and int(row[2]) == 3 * 100 - 3  # three boundaries a turn
        save, client, ratio = float(row[3]), float(row[5]), float(row[7].rstrip("x"))
        assert abs(save / client - ratio) <= 0.01 + 0.05 * ratio, row
        assert int(row[9]) > 0  # bytes written per boundary


def test_boundary_save_breaks_a_save_down_into_its_parts() -> None:
    if redis_binary() is None:
        missing("redis-server")
    output = _bench("boundary_save.py", "--backends", "redis", "--breakdown")
    parts = [line.split() for line in output.splitlines() if "p50 ms: diff" in line]
    assert len(parts) == 1, output
    diff, chain, store, rest, client = (float(parts[0][i].rstrip(",;")) for i in (3, 5, 8, 11, 13))
    assert min(diff, chain, store, client) > 0 and rest >= 0


def test_checkpoint_overhead_measures_both_layouts_amplification() -> None:
    output = _bench(
        "checkpoint_overhead.py", "--parts", "amplification", "--backends", "memory,file"
    )
    assert "set p50" not in output  # the save part was left out
    off, *rows = _rows(output, "backend")[:4]
    assert off[0] == "off" and off[-1] == "(baseline)" and float(off[-2]) > 0
    assert [(row[0], row[1]) for row in rows] == [
        ("memory", "snapshot"),
        ("memory", "journal"),
        ("file", "snapshot"),  # a file store keeps snapshots only
    ]
    by_layout = {(row[0], row[1]): row for row in rows}
    snapshot, journal = by_layout["memory", "snapshot"], by_layout["memory", "journal"]
    for row in rows:
        written, final, ratio = int(row[2]), int(row[3]), float(row[4].rstrip("x"))
        assert abs(written / final - ratio) <= 0.05 + 0.001 * ratio, row
        assert int(row[6]) > 0  # boundaries counted
    assert int(journal[2]) * 5 < int(snapshot[2])  # the journal writes far fewer bytes
    assert abs(int(journal[3]) - int(snapshot[3])) <= 0.01 * int(snapshot[3])  # same final state


def test_checkpoint_overhead_runs_the_turn_counts_asked_for() -> None:
    output = _bench(
        "checkpoint_overhead.py",
        "--parts",
        "amplification",
        "--backends",
        "memory",
        "--turns",
        "12,40",
    )
    titles = [line for line in output.splitlines() if line.startswith("write amplification")]
    assert [title.split()[4] for title in titles] == ["12-turn", "40-turn"]
    refused = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "checkpoint_overhead.py"), "--turns", "ten"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "turn counts are whole numbers" in refused.stderr


class NoteInput(BaseModel):
    note: str


async def test_incremental_snapshot_text_is_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every boundary's encoded text equals ``build_snapshot().to_json()`` (but createdAt)."""
    checked: list[int] = []
    encode = snapshot_build.encode_snapshot

    async def checking(context: RunContext, *, embed_shared_memory: bool) -> EncodedSnapshot:
        encoded = await encode(context, embed_shared_memory=embed_shared_memory)
        model = json.loads(
            (await build_snapshot(context, embed_shared_memory=embed_shared_memory)).to_json()
        )
        written = json.loads(encoded.text)
        model["createdAt"] = written["createdAt"]
        assert json.dumps(model) == json.dumps(written)  # same keys, order and values
        assert encoded.metadata["createdAt"] == written["createdAt"]
        checked.append(len(encoded.text))
        return encoded

    monkeypatch.setattr(saver, "encode_snapshot", checking)

    async def note(args: NoteInput, ctx: ToolContext) -> str:
        return f"noted {args.note}"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "note", "input": {"note": "a", "extra": None}}]},
        {"text": "done"},
    ]
    agent = AgentConfig(
        name="w",
        adapter=ScriptedAdapter(script),
        tools=[define_tool("note", "Note.", NoteInput, note)],
    )
    tasks = [
        {"title": "A", "description": "first", "assignee": "w"},
        {"title": "B", "description": "second", "assignee": "w", "dependsOn": ["A"]},
        {"title": "C", "description": "third", "assignee": "w", "metadata": {"k": [1, 2.5]}},
    ]
    result = await OpenMultiAgent().run_tasks(
        Team(name="t", agents=[agent], shared_memory_store=InMemoryStore()),
        tasks,  # type: ignore[arg-type]
        checkpoint=CheckpointOptions(store=InMemoryStore(), run_id="wire"),
        metadata={"team": "bench"},
    )
    assert result.success, result.status
    assert len(checked) == 3 * 5 + 1


async def test_restored_snapshot_text_is_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restored parts (tasks, runner state) with lone surrogates in keys, as the reference
    writes them, are encoded as the model's dump writes them (escaped, not replaced)."""
    checked: list[bool] = []
    encode = snapshot_build.encode_snapshot

    async def checking(context: RunContext, *, embed_shared_memory: bool) -> EncodedSnapshot:
        encoded = await encode(context, embed_shared_memory=embed_shared_memory)
        model = jsonutil.loads(
            (await build_snapshot(context, embed_shared_memory=embed_shared_memory)).to_json()
        )
        written = jsonutil.loads(encoded.text)
        model["createdAt"] = written["createdAt"]
        checked.append(jsonutil.dumps(model) == jsonutil.dumps(written))
        return encoded

    monkeypatch.setattr(saver, "encode_snapshot", checking)
    stamp = "2026-11-29T00:00:00.000Z"
    snapshot = {
        "version": 4,
        "mode": "runTasks",
        "createdAt": stamp,
        "identity": {
            "runId": "s",
            "attempt": 1,
            "lastTraceId": "a" * 32,
            "lastRootSpanId": "b" * 16,
        },
        "queue": {
            "version": 1,
            "tasks": [
                {
                    "id": "t1",
                    "title": "T",
                    "description": "d",
                    "status": "in_progress",
                    "assignee": "w",
                    "metadata": {"m": "\ud800m"},  # keys are [A-Za-z]...: surrogates in values
                    "createdAt": stamp,
                    "updatedAt": stamp,
                }
            ],
            "inProgress": ["t1"],
        },
        "completedTaskResults": [],
        "pendingApprovals": [],
        "approvalDecisions": [],
        "inFlightTasks": [
            {
                "taskId": "t1",
                "assignee": "w",
                "phase": "awaiting_model",
                "conversationMessages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]}
                ],
                "messages": [],
                "tokenUsage": {"input_tokens": 1, "output_tokens": 1},
                "toolCalls": [
                    {
                        "toolName": "x",
                        "input": {"\ud802k": {"\ud803": 2}},
                        "output": "o",
                        "duration": 1,
                    }
                ],
                "turns": 0,
            }
        ],
    }
    store = InMemoryStore()
    await store.set("__oma_checkpoint__/s/latest", jsonutil.dumps(snapshot))
    agent = AgentConfig(name="w", adapter=ScriptedAdapter([{"text": "done"}]))
    events: list[OrchestratorEvent] = []
    result = await OpenMultiAgent(on_progress=events.append).restore(
        Team(name="t", agents=[agent]),
        checkpoint=CheckpointOptions(store=store, run_id="s", fence=True),
    )
    assert result.success, result.status
    # The claim, the runner's boundary, the completion and the run's end: every save landed,
    # also those holding the completed result whose tool input has those keys.
    assert checked == [True] * 4
    assert [e for e in events if e.type == "error"] == []
    final = jsonutil.loads((await store.get("__oma_checkpoint__/s/latest")).value)  # type: ignore[union-attr]
    (completed,) = final["completedTaskResults"]
    assert completed["agentResult"]["toolCalls"][0]["input"] == {"\ud802k": {"\ud803": 2}}
