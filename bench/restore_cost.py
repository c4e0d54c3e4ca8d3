"""Restore cost: from a stored snapshot to the first model call of the resumed run, per backend.

    .venv/bin/python bench/restore_cost.py [--quick] [--backends memory,file,redis,postgres]
        [--layout snapshot|journal]

For snapshots of about 100 KB, 1 MB and 10 MB (half completed tasks with their results, half
the conversation of one in-flight task, as a long run leaves them), times the real
``OpenMultiAgent.restore()`` path up to the moment the resumed task's model is called: store
read, JSON decode, strict validation, rebuild of the queue, results, identity and the runner's
conversation. Also prints the read alone and decode + validation alone (same run, same store).
Garbage of the previous repeat is collected before each one (a restore runs in a fresh runner
process). Redis and PostgreSQL are started as child processes. p50/p99 in ms.

``--layout journal`` stores the same document as a journal (what ``oma run`` and runner pods
write where the store keeps journals: memory, Redis, PostgreSQL): a base written as a compaction
writes it, then ``JOURNAL_DELTAS`` deltas of one message each, so a restore assembles it from
records; ``read`` is then the store's ``journal_get`` and ``parse`` its assembly and validation.
The baseline stays the client's plain read of the whole snapshot text plus ``orjson.loads``.

``--layout run`` restores journals written by real runs instead: a task of 100, 300 and 1,000
turns (a tool call each, saved fenced at every boundary as ``oma run`` saves), its model
unavailable at the last turn so that the run stops there with the task in flight. The journal is
whatever the run left (its last base and every delta since), and the baseline the client's read
plus ``orjson.loads`` of that run's final snapshot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import itertools
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from benchlib import BACKENDS, backend_pairs, header, parse_backends, percentile
from plain_writes import PlainWriter
from pydantic import BaseModel

from oma import jsonutil
from oma.checkpoint import Checkpoint, parse_snapshot, segments
from oma.checkpoint.delta import relative
from oma.checkpoint.delta_diff import diff
from oma.checkpoint.journal import assemble_journal, base_records, load_journal
from oma.checkpoint.manager import decode_snapshot
from oma.checkpoint.snapshot import CheckpointSnapshot
from oma.checkpoint.validation import MAX_SNAPSHOT_DEPTH
from oma.errors import ModelUnavailableError
from oma.llm.scripted import ScriptedAdapter
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import MemoryStore
from oma.store.base import close_store
from oma.store.journal import JournalEntry, JournalStore, supports_journal
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool

SIZES = {"100 KB": 100_000, "1 MB": 1_000_000, "10 MB": 10_000_000}
RUN_TURNS = {"100 turns": 100, "300 turns": 300, "1000 turns": 1000}
JOURNAL_DELTAS = 20  # deltas after the base: one appended message each
STAMP = "2026-11-29T00:00:00.000Z"
LOREM = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
RUN_ID = "restore-bench"


class FirstCall(Exception):
    """Raised by the bench model at its first call: the restore has reached the model."""


class StopwatchModel:
    """A model that records when it is first called and then fails the task at once."""

    name = "stopwatch"

    def __init__(self) -> None:
        self.called_at: float | None = None
        self.messages = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        if self.called_at is None:
            self.called_at = time.perf_counter()
            self.messages = len(request.messages)
        raise FirstCall


def _note_call(i: int) -> dict[str, Any]:
    return {"id": f"c{i}", "name": "note", "input": {"note": f"finding {i} " * 8}}


class StopsAt:
    """The run's model: the script's turns, then unavailable at turn ``turns`` (the run parks
    there, its task in flight, as an attempt that ends in a provider outage leaves it)."""

    name = "stops-at"

    def __init__(self, turns: int) -> None:
        script: list[dict[str, Any]] = [{"tool_calls": [_note_call(i)]} for i in range(turns)]
        self.script, self.turns, self.calls = ScriptedAdapter(script), turns, 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.calls >= self.turns:
            raise ModelUnavailableError("the bench's run stops here")
        return await self.script.chat(request)


class NoteInput(BaseModel):
    note: str


async def _note(args: NoteInput, ctx: ToolContext) -> str:
    return f"noted {args.note}"


async def run_journal(store: MemoryStore, turns: int) -> str:
    """Run a task of ``turns`` turns into ``store`` (a journal, fenced saves, as ``oma run``),
    stopped at its last model call; the final snapshot's text."""
    note = define_tool("note", "Note a finding.", NoteInput, _note)
    worker = AgentConfig(name="worker", adapter=StopsAt(turns), max_turns=turns + 5, tools=[note])
    options = CheckpointOptions(store=store, run_id=RUN_ID, fence=True, journal=True)
    with contextlib.suppress(ModelUnavailableError):  # the stop at the last turn
        await OpenMultiAgent(park_on_model_outage=True).run_tasks(
            Team(name="bench", agents=[worker]),
            [{"title": "Long", "description": "Many turns."}],
            checkpoint=options,
        )
    loaded = await Checkpoint(store, run_id=RUN_ID).load_latest()
    assert loaded is not None and loaded.in_flight_tasks  # stopped with its task in flight
    return loaded.to_json()


def _task(task_id: str, status: str, result: str | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": task_id,
        "title": f"Task {task_id}",
        "description": "Part of a long run. " * 4,
        "status": status,
        "assignee": "worker",
    }
    if result is not None:
        task["result"] = result
    return task | {"createdAt": STAMP, "updatedAt": STAMP}


def _completed(task_id: str, output: str) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": f"# Task: {task_id}\n" + LOREM}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": f"call-{task_id}", "name": "lookup", "input": {"q": 1}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"call-{task_id}", "content": LOREM}
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": output}]},
    ]
    return {
        "taskId": task_id,
        "assignee": "worker",
        "result": output,
        "agentResult": {
            "success": True,
            "status": {"code": "ok"},
            "output": output,
            "messages": messages,
            "tokenUsage": {"input_tokens": 10, "output_tokens": 20},
            "toolCalls": [
                {"toolName": "lookup", "input": {"q": 1}, "output": LOREM, "duration": 3}
            ],
        },
    }


def snapshot_of_size(target: int) -> dict[str, Any]:
    """A v4 snapshot of about ``target`` bytes: completed tasks and one long in-flight task."""
    output = LOREM * 8
    per_completed = len(jsonutil.dumps(_completed("t0000", output))) + 300  # + its queue entry
    completed_ids = [f"t{i:05d}" for i in range(max(1, target // 2 // per_completed))]
    conversation: list[dict[str, Any]] = []
    in_flight: dict[str, Any] = {
        "taskId": "live",
        "assignee": "worker",
        "phase": "awaiting_model",
        "conversationMessages": conversation,
        "messages": [],
        "tokenUsage": {"input_tokens": 1, "output_tokens": 1},
        "toolCalls": [],
        "turns": 0,
    }
    snapshot: dict[str, Any] = {
        "version": 4,
        "mode": "runTasks",
        "createdAt": STAMP,
        "identity": {
            "runId": RUN_ID,
            "attempt": 1,
            "lastTraceId": "a" * 32,
            "lastRootSpanId": "b" * 16,
        },
        "queue": {
            "version": 1,
            "tasks": [_task(i, "completed", output) for i in completed_ids]
            + [_task("live", "in_progress")],
            "pending": [],
            "inProgress": ["live"],
            "completed": completed_ids,
            "failed": [],
            "blocked": [],
            "skipped": [],
        },
        "completedTaskResults": [_completed(i, output) for i in completed_ids],
        "pendingApprovals": [],
        "approvalDecisions": [],
        "inFlightTasks": [in_flight],
    }
    size = len(jsonutil.dumps(snapshot))
    turn = 0
    text = LOREM * 40
    while size < target:
        if turn % 2 == 0:
            message: dict[str, Any] = {
                "role": "user",
                "content": [{"type": "text", "text": f"turn {turn}: {text}"}],
            }
        else:
            message = {"role": "assistant", "content": [{"type": "text", "text": text}]}
        conversation.append(message)
        in_flight["messages"].append(message)
        size += 2 * (len(jsonutil.dumps(message)) + 1)
        turn += 1
    if len(conversation) % 2 == 0:  # the model is asked after a user turn
        conversation.append({"role": "user", "content": [{"type": "text", "text": "go on"}]})
    in_flight["turns"] = sum(1 for m in conversation if m["role"] == "assistant")
    return snapshot


async def restore_once(store: MemoryStore) -> tuple[float, int]:
    """Milliseconds from ``restore()`` to the first model call, and the messages it was given."""
    model = StopwatchModel()
    team = Team(name="bench", agents=[AgentConfig(name="worker", adapter=model, max_turns=10**6)])
    started = time.perf_counter()
    result = await OpenMultiAgent().restore(
        team, checkpoint=CheckpointOptions(store=store, run_id=RUN_ID)
    )
    assert model.called_at is not None, result.status  # the resumed task reached its model
    return (model.called_at - started) * 1000, model.messages


@dataclass(frozen=True)
class Row:
    client: list[float]  # the client library's plain read of the text + orjson.loads
    read: list[float]  # our store's get
    parse: list[float]  # decode + strict validation
    load: list[float]  # Checkpoint.load_latest: read, decode, validation
    restore: list[float]  # OpenMultiAgent.restore() until the model is called
    size: int


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


def journal_records(document: dict[str, Any], deltas: int) -> list[str]:
    """``document`` as a journal: the base a compaction writes of it without its in-flight
    task's last ``deltas`` messages, then one delta per message put back."""
    states = []
    for back in range(deltas, -1, -1):
        state = copy.deepcopy(document)
        task = state["inFlightTasks"][0]
        for field in ("conversationMessages", "messages"):
            task[field] = task[field][: max(1, len(task[field]) - back)]
        states.append(state)
    records = base_records(states[0])
    for before, after in itertools.pairwise(states):
        records.append(jsonutil.dumps(relative(diff(before, after))))
    return records


async def _store_journal(store: JournalStore, key: str, text: str) -> None:
    records = journal_records(orjson.loads(text), JOURNAL_DELTAS)
    assert await store.journal_write(key, records, version="bench", expected=None, replace=True)
    found = await load_journal(store, key, MAX_SNAPSHOT_DEPTH)
    assert found is not None and jsonutil.dumps(found[0]) == text  # the same document
    assert found[1].within_depth  # bounded without a walk of the whole document


def _parse_journal(entry: JournalEntry | None, key: str, texts: dict[int, str] | None) -> None:
    assert entry is not None
    document, stored = assemble_journal(entry, key, MAX_SNAPSHOT_DEPTH, texts)
    parse_snapshot(document, key, depth_checked=stored.within_depth)


async def measure(
    store: MemoryStore,
    plain: PlainWriter,
    snapshot: CheckpointSnapshot | None,
    repeats: int,
    journal: bool = False,
    turns: int | None = None,
) -> Row:
    """One row; ``turns``: the journal a real run of that many turns writes (``snapshot``
    unused), else ``snapshot`` stored in the layout asked."""
    checkpoint = Checkpoint(store, run_id=RUN_ID)
    if turns is not None:
        text = await run_journal(store, turns)
        snapshot = parse_snapshot(orjson.loads(text), "bench")
        version = await store.journal_version(checkpoint.key)  # type: ignore[attr-defined]
    else:
        assert snapshot is not None
        text = snapshot.to_json()
        version = "bench"
    if journal and turns is None:
        assert supports_journal(store)
        await _store_journal(store, checkpoint.key, text)
    elif not journal:
        await checkpoint.save(snapshot)
        entry = await store.get(checkpoint.key)
        assert entry is not None
        text = entry.value
    await plain.write("plain-restore", text)
    row = Row([], [], [], [], [], len(text))
    expected_messages = len(snapshot.in_flight_tasks[0].conversation_messages)  # type: ignore[union-attr]
    for _ in range(repeats):
        # Each attempt restores in a fresh runner process: collect the previous repeat's
        # garbage (cycles of a finished run) outside the timing, as a new process has none.
        gc.collect()
        started = time.perf_counter()
        raw = await plain.read("plain-restore")
        assert raw is not None
        orjson.loads(raw)
        row.client.append(_ms(started))
        del raw
        gc.collect()
        if journal and supports_journal(store):
            started = time.perf_counter()
            entry = await store.journal_get(checkpoint.key)
            assert entry is not None
            texts = await segments.read_named(store, checkpoint.key, entry.records[0])
            row.read.append(_ms(started))
            started = time.perf_counter()
            _parse_journal(entry, checkpoint.key, texts)
            row.parse.append(_ms(started))
            del entry
        else:
            started = time.perf_counter()
            await store.get(checkpoint.key)
            row.read.append(_ms(started))
            started = time.perf_counter()
            decode_snapshot(text, checkpoint.key)
            row.parse.append(_ms(started))
        gc.collect()
        started = time.perf_counter()
        loaded = await checkpoint.load_latest()
        row.load.append(_ms(started))
        assert loaded is not None
        del loaded
        gc.collect()
        elapsed, messages = await restore_once(store)
        assert messages == expected_messages, (messages, expected_messages)
        row.restore.append(elapsed)
        if journal and supports_journal(store):  # nothing was written meanwhile
            assert await store.journal_version(checkpoint.key) == version
        else:
            stored = await store.get(checkpoint.key)
            assert stored is not None and stored.value == text
    return row


def _pair(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.2f} {percentile(samples, 0.99):7.2f}"


async def main(args: argparse.Namespace) -> None:
    print(header("restore cost", args.quick))
    if args.layout == "run":
        print(
            "layout run: the journal a real run of N turns left (its last base and every delta"
            " since); the client baseline reads and decodes that run's final snapshot\n"
        )
    if args.layout == "journal":
        print(
            f"layout journal: a base and {JOURNAL_DELTAS} deltas; read = journal_get, parse = "
            "its assembly + validation\n"
        )
    print(
        "times in ms, p50 and p99 of each; client = the client library's plain read of the same"
        " text + orjson.loads\n(the baseline); read = our store's get; parse = JSON decode +"
        " strict validation; load =\nCheckpoint.load_latest (read, decode, validation); restore"
        " = OpenMultiAgent.restore() until the\nresumed task's model is called; x = p50 / client"
        " p50\n"
    )
    print(
        f"{'backend':9} {'size':>6} {'n':>3} {'client':>7} {'p99':>7} {'read':>7} {'p99':>7} "
        f"{'parse':>7} {'p99':>7} {'load':>7} {'p99':>7} {'restore':>7} {'p99':>7} "
        f"{'load x':>6} {'rest. x':>7} {'bytes':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="oma-bench-") as tmp:
        async with backend_pairs(Path(tmp), args.backends) as pairs:
            for name, (make, make_plain) in pairs.items():
                journal = args.layout in ("journal", "run")
                if journal and name == "file":
                    print(f"{name:9} (keeps no journals: snapshot layout only)")
                    continue
                plain = await make_plain()
                for size_name in args.sizes:
                    # Built per measurement and dropped after: a live heap holding every size
                    # at once would make each garbage collection, and so the p99, slower.
                    turns = RUN_TURNS.get(size_name) if args.layout == "run" else None
                    snapshot = None
                    if turns is None:
                        snapshot = parse_snapshot(snapshot_of_size(SIZES[size_name]), "bench")
                    repeats = args.repeats[size_name]
                    store = await make()
                    row = await measure(store, plain, snapshot, repeats, journal, turns)
                    base = statistics.median(row.client)
                    print(
                        f"{name:9} {size_name.replace(' turns', 't'):>6} {repeats:>3} "
                        f"{_pair(row.client)} "
                        f"{_pair(row.read)} {_pair(row.parse)} {_pair(row.load)} "
                        f"{_pair(row.restore)} {statistics.median(row.load) / base:5.1f}x "
                        f"{statistics.median(row.restore) / base:6.1f}x {row.size:>9}"
                    )
                    await close_store(store)
                    del snapshot
                    gc.collect()
                await plain.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 KB and 1 MB, memory and file")
    parser.add_argument("--backends", type=parse_backends, default=None, help="comma-separated")
    parser.add_argument(
        "--layout",
        choices=("snapshot", "journal", "run"),
        default="snapshot",
        help="how the checkpoint is stored (journal: memory, Redis, PostgreSQL; run: the "
        "journals real runs of 100, 300 and 1,000 turns leave)",
    )
    args = parser.parse_args(argv)
    if args.layout == "run":
        args.sizes = ["100 turns", "300 turns"] if args.quick else list(RUN_TURNS)
        args.repeats = {"100 turns": 5, "300 turns": 5, "1000 turns": 3}
        if not args.quick:  # a repeat at 1,000 turns takes ~60 ms: enough for a steady p50
            args.repeats = {"100 turns": 30, "300 turns": 30, "1000 turns": 30}
        args.backends = args.backends or (["memory"] if args.quick else ["redis", "postgres"])
        return args
    if args.quick:
        args.sizes = ["100 KB", "1 MB"]
        args.repeats = {"100 KB": 5, "1 MB": 3}
        args.backends = args.backends or ["memory", "file"]
    else:
        args.sizes = list(SIZES)
        args.repeats = {"100 KB": 50, "1 MB": 30, "10 MB": 10}
        args.backends = args.backends or list(BACKENDS)
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
