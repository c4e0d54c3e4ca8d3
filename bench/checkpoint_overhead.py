"""Checkpoint save cost per backend, against a raw write of the same bytes, and write
amplification of a long conversation.

    .venv/bin/python bench/checkpoint_overhead.py [--quick] [--parts P,...] [--backends B,...]
        [--langgraph] [--shape conversation|run]

Starts its own redis-server and PostgreSQL as child processes (Debian packages, as the tests
use) and stops them at the end. Prints, per backend and snapshot size (about 10 KB, 100 KB,
1 MB): p50/p99 of ``Checkpoint.save`` (plain and fenced) and of a raw ``set`` of the same
string to the same store in the same run, and their ratio; and against issue 47's baseline,
``orjson.dumps`` of the same document (as plain data) plus the client's write of its bytes.
``--shape run`` saves snapshots shaped as a long run leaves them (completed tasks with their
results, tool calls and results, one long in-flight conversation) instead of one conversation
of long messages. Then runs agent conversations of
10, 300 and 1,000 turns (60 with ``--quick``) on each backend, in both checkpoint layouts
(whole snapshots, and the journal where the store keeps one), and prints total bytes written /
final snapshot size and the checkpoint cost per boundary against a run with checkpointing off.
``--parts amplification`` runs only that part, ``--backends memory,redis`` only those stores.

``--langgraph`` also runs LangGraph's checkpointing on the same conversations, with its default
channels and with its ``DeltaChannel``, in memory and on the same PostgreSQL, and prints those
rows under oma's: ``bench/langgraph/amplification.py``, in a virtual environment of its own
made on first use from ``bench/langgraph/requirements.txt`` (pip, so the network) under
``~/.cache/oma/bench-venvs/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import orjson  # noqa: E402
from bench.langgraph_side import (  # noqa: E402
    LangGraphSide,
    ServerUrls,
    ensure_langgraph_venv,
    langgraph_side,
    print_langgraph,
    redis_note,
)
from bench.plain_writes import (  # noqa: E402
    PlainWriter,
    file_writer,
    memory_writer,
    postgres_writer,
    redis_writer,
)
from bench.restore_cost import snapshot_of_size as run_shaped_snapshot  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from tests.servers.postgres_server import PostgresServer, postgres_bin_dir  # noqa: E402
from tests.servers.redis_server import RedisServer, redis_binary  # noqa: E402

from oma.checkpoint import (  # noqa: E402
    Checkpoint,
    CheckpointSnapshotV4,
    parse_snapshot,
    snapshot_metadata,
)
from oma.llm.scripted import ScriptedAdapter  # noqa: E402
from oma.orchestrator import CheckpointOptions, OpenMultiAgent  # noqa: E402
from oma.store import FileStore, InMemoryStore, MemoryStore, PostgresStore, RedisStore  # noqa: E402
from oma.store.base import Metadata, close_store, supports_compare_and_set  # noqa: E402
from oma.team import AgentConfig, Team  # noqa: E402
from oma.tools import ToolContext, define_tool  # noqa: E402

SIZES = {"10 KB": 10_000, "100 KB": 100_000, "1 MB": 1_000_000}
WARM_UP_ROUNDS = 5  # untimed rounds before a size is measured
# conversation: one in-flight task whose conversation of long text messages fills the size;
# run: what a long run leaves (completed tasks with their results, tool calls and tool results,
# and one long in-flight task: ``bench/restore_cost.py``), many more, smaller, objects.
SHAPES = ("conversation", "run")


def snapshot_of_size(target: int) -> CheckpointSnapshotV4:
    """A realistic v4 snapshot: one in-flight task whose conversation fills ``target`` bytes."""
    base: dict[str, Any] = {
        "version": 4,
        "mode": "runTasks",
        "createdAt": "2026-11-29T00:00:00.000Z",
        "identity": {
            "runId": "bench",
            "attempt": 1,
            "lastTraceId": "a" * 32,
            "lastRootSpanId": "b" * 16,
        },
        "queue": {
            "version": 1,
            "tasks": [
                {
                    "id": "t1",
                    "title": "Bench",
                    "description": "d",
                    "status": "in_progress",
                    "assignee": "w",
                    "createdAt": "2026-11-29T00:00:00.000Z",
                    "updatedAt": "2026-11-29T00:00:00.000Z",
                }
            ],
            "pending": [],
            "inProgress": ["t1"],
            "completed": [],
            "failed": [],
            "blocked": [],
            "skipped": [],
        },
        "completedTaskResults": [],
        "pendingApprovals": [],
        "approvalDecisions": [],
        "inFlightTasks": [
            {
                "taskId": "t1",
                "assignee": "w",
                "phase": "awaiting_model",
                "conversationMessages": [],
                "messages": [],
                "tokenUsage": {"input_tokens": 1, "output_tokens": 1},
                "toolCalls": [],
                "turns": 0,
            }
        ],
    }
    turn = 0
    while len(json.dumps(base)) < target:
        text = f"turn {turn}: " + "lorem ipsum dolor sit amet " * 40
        message = {
            "role": "user" if turn % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": text}],
        }
        base["inFlightTasks"][0]["conversationMessages"].append(message)
        turn += 1
    return parse_snapshot(base, "bench")  # type: ignore[return-value]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(action: Callable[[], Awaitable[Any]], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def shaped_snapshot(shape: str, size: int) -> CheckpointSnapshotV4:
    if shape == "run":
        return parse_snapshot(run_shaped_snapshot(size), "bench")  # type: ignore[return-value]
    return snapshot_of_size(size)


async def measure_saves(
    store: MemoryStore, client: PlainWriter, label: str, repeats: int, shape: str
) -> list[str]:
    rows = []
    for size_name, size in SIZES.items():
        count = max(5, repeats // (4 if size >= 1_000_000 else 1))
        snapshot = shaped_snapshot(shape, size)
        rows.append(await measure_size(store, client, label, size_name, snapshot, count))
    return rows


async def measure_size(
    store: MemoryStore,
    client: PlainWriter,
    label: str,
    size_name: str,
    snapshot: CheckpointSnapshotV4,
    count: int,
) -> str:
    text = snapshot.to_json()
    document = orjson.loads(text)  # the same document as plain data, as a caller may hold it
    checkpoint = Checkpoint(store, run_id=f"bench-{label}")

    async def encode() -> None:
        snapshot.to_json()
        snapshot_metadata(snapshot)

    async def dumps() -> None:
        orjson.dumps(document)

    async def dumps_and_write() -> None:
        # Issue 47's baseline: encoding the document is not counted against a save.
        await client.write("bench/encoded", orjson.dumps(document))

    # Round by round, so that a change of the machine's pace during the run (other processes,
    # the server's own work) weighs on the baseline and on our write alike; a few untimed
    # rounds first (connections, the server's prepared statements).
    actions = (
        lambda: client.write("bench/plain", text),
        lambda: store.set("bench/raw", text),
        lambda: checkpoint.save(snapshot),
        encode,
        dumps,
        dumps_and_write,
    )
    for _ in range(WARM_UP_ROUNDS):
        for action in actions:
            await action()
    plain_write, raw, plain, encodings, dumped, baseline = [], [], [], [], [], []
    series = (plain_write, raw, plain, encodings, dumped, baseline)
    for _ in range(count):
        for action, samples in zip(actions, series, strict=True):
            samples.extend(await timed(action, 1))
    encoding = statistics.median(encodings)
    stored = await store.get(checkpoint.key)
    state: dict[str, str | None] = {"expected": stored.value if stored else None}

    async def fenced() -> None:
        state["expected"] = await checkpoint.save_if(snapshot, state["expected"])

    fenced_samples = await timed(fenced, count) if supports_compare_and_set(store) else []
    p50_client = statistics.median(plain_write)
    fenced_cell = (
        f"{statistics.median(fenced_samples):7.2f} {percentile(fenced_samples, 0.99):7.2f}"
        if fenced_samples
        else f"{'-':>7} {'-':>7}"
    )
    return (
        f"{label:9} {size_name:>6} {len(text):>9} "
        f"{p50_client:7.2f} {percentile(plain_write, 0.99):7.2f}  "
        f"{statistics.median(raw):7.2f} {percentile(raw, 0.99):7.2f}  "
        f"{statistics.median(plain):7.2f} {percentile(plain, 0.99):7.2f}  {fenced_cell}  "
        f"{statistics.median(plain) / p50_client:6.2f}x {encoding:7.2f} "
        f"{(encoding + p50_client) / p50_client:6.2f}x  "
        f"{statistics.median(dumped):7.2f} {statistics.median(baseline):7.2f} "
        f"{statistics.median(plain) / statistics.median(baseline):6.2f}x"
    )


class CountingStore:
    """Counts the bytes of every value written through it, and keeps the size of each
    snapshot written to a checkpoint's ``.../latest`` key (one per boundary)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.written = 0
        self.snapshots: list[int] = []  # bytes of each ``.../latest`` write, in order

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        size = len(value.encode())
        self.written += size
        if key.endswith("/latest"):
            self.snapshots.append(size)
        await self.inner.set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        size = len(value.encode())
        self.written += size
        if key.endswith("/latest"):
            self.snapshots.append(size)
        return bool(await self.inner.compare_and_set(key, expected, value, metadata))

    async def journal_write(self, key: str, records: Sequence[str], **options: Any) -> bool:
        size = sum(len(record.encode()) for record in records)
        self.written += size
        self.snapshots.append(size)
        return bool(await self.inner.journal_write(key, records, **options))


class NoteInput(BaseModel):
    note: str


@dataclass(frozen=True)
class Amplification:
    written: int  # every byte written to the store in the run
    final: int  # the last snapshot
    seconds: float
    snapshots: list[int]  # the snapshot written at each boundary, in bytes


async def amplification(
    store: MemoryStore | None, turns: int, layout: str = "snapshot"
) -> Amplification:
    """The run's bytes and time with ``store``, fenced as ``oma run`` saves, in ``layout``;
    without a store, checkpointing off (the baseline: nothing written, the same run's time)."""

    async def note(args: NoteInput, ctx: ToolContext) -> str:
        return f"noted {args.note}"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "note", "input": {"note": f"finding {i} " * 8}}]}
        for i in range(turns - 1)
    ] + [{"text": "done"}]
    agent = AgentConfig(
        name="w",
        adapter=ScriptedAdapter(script),
        max_turns=turns + 1,
        tools=[define_tool("note", "Note.", NoteInput, note)],
    )
    counting = None if store is None else CountingStore(store)
    started = time.perf_counter()
    result = await OpenMultiAgent().run_tasks(
        Team(name="amp", agents=[agent]),
        [{"title": "Long", "description": "Many turns."}],
        checkpoint=False
        if counting is None
        else CheckpointOptions(
            store=counting, run_id="amp", fence=True, journal=layout == "journal"
        ),
    )
    elapsed = time.perf_counter() - started
    assert result.success, result.status
    if store is None or counting is None:
        return Amplification(0, 0, elapsed, [])
    final, stored = await Checkpoint(store, run_id="amp").load_stored()
    assert final is not None and stored is not None and stored.layout == layout
    size = len(final.to_json().encode())
    return Amplification(counting.written, size, elapsed, counting.snapshots)


StoreFactory = Callable[[], Awaitable[MemoryStore]]
Backends = dict[str, tuple[StoreFactory, Callable[[], Awaitable[PlainWriter]]]]


@asynccontextmanager
async def backends(workdir: Path) -> AsyncIterator[tuple[Backends, ServerUrls]]:
    """Per backend: a fresh store of ours, and the client library's plain writer to the same
    server (the baseline); and the URLs of the servers started."""
    redis_path, pg_dir = redis_binary(), postgres_bin_dir()
    redis_server = RedisServer(redis_path).start() if redis_path else None
    pg_server = PostgresServer(pg_dir).start() if pg_dir else None
    counter = iter(range(1000))

    async def memory() -> MemoryStore:
        return InMemoryStore()

    async def file() -> MemoryStore:
        return FileStore(workdir / f"bench-{next(counter)}.json")

    async def redis() -> MemoryStore:
        assert redis_server is not None
        return RedisStore(redis_server.url, namespace=f"bench{next(counter)}")

    async def postgres() -> MemoryStore:
        assert pg_server is not None
        store = PostgresStore(pg_server.dsn(), schema=f"bench{next(counter)}")
        await store.open()
        return store

    async def plain_memory() -> PlainWriter:
        return memory_writer()

    async def plain_file() -> PlainWriter:
        return file_writer(workdir)

    async def plain_redis() -> PlainWriter:
        assert redis_server is not None
        return await redis_writer(redis_server.url)

    async def plain_postgres() -> PlainWriter:
        assert pg_server is not None
        return await postgres_writer(pg_server.dsn())

    made: Backends = {"memory": (memory, plain_memory), "file": (file, plain_file)}
    urls: ServerUrls = {}
    if redis_server:
        made["redis"] = (redis, plain_redis)
        urls["redis"] = redis_server.url
    if pg_server:
        made["postgres"] = (postgres, plain_postgres)
        urls["postgres"] = pg_server.dsn()
    try:
        yield made, urls
    finally:
        for server in (redis_server, pg_server):
            if server is not None:
                server.close()


PARTS = ("saves", "amplification")


async def main(
    quick: bool,
    parts: tuple[str, ...] = PARTS,
    names: tuple[str, ...] = (),
    langgraph_python: Path | None = None,
    turns: tuple[int, ...] = (),
    shape: str = "conversation",
) -> None:
    repeats, turn_counts = (10, (60,)) if quick else (60, (10, 300, 1000))
    turn_counts = turns or turn_counts
    print(
        f"# checkpoint overhead · {platform.node()} · {platform.processor() or platform.machine()}"
        f" · Python {platform.python_version()} · {'quick' if quick else 'full'} run"
        f" · parts {','.join(parts)}"
    )
    with tempfile.TemporaryDirectory(prefix="oma-bench-") as tmp:
        async with backends(Path(tmp)) as (available, urls):
            chosen = {n: pair for n, pair in available.items() if not names or n in names}
            stores = {n: make for n, (make, _) in chosen.items()}
            if "saves" in parts:
                print(
                    "times in ms; client = the client library's plain write of the same string "
                    "(the baseline),\nset = our store's set of it, save = Checkpoint.save of the "
                    "model; ratio = p50 save / p50 client;\nfloor = (p50 encode + p50 client) / "
                    "p50 client, encode = the model's JSON and metadata alone:\nwhat a save "
                    "would cost with a store that wrote as cheaply as the client;\ndumps = "
                    "orjson.dumps of the same document as plain data, base = dumps + the client's "
                    "write of\nits bytes (issue 47's baseline), x base = p50 save / p50 base\n"
                    f"snapshot shape: {shape}\n"
                )
                print(
                    f"{'backend':9} {'size':>6} {'bytes':>9} {'client':>7} {'p99':>7}  "
                    f"{'set p50':>7} {'p99':>7}  {'save p50':>7} {'p99':>7}  "
                    f"{'fenced':>7} {'p99':>7}  {'ratio':>7} {'encode':>7} {'floor':>7}  "
                    f"{'dumps':>7} {'base':>7} {'x base':>7}"
                )
                for name, (make, make_client) in chosen.items():
                    store, client = await make(), await make_client()
                    for row in await measure_saves(store, client, name, repeats, shape):
                        print(row)
                    await close_store(store)
                    await client.close()
            if "amplification" in parts:
                langgraph = langgraph_side(langgraph_python, names, urls)
                for count in turn_counts:
                    await print_amplification(stores, count, quick, langgraph)
                if langgraph is not None:
                    print(f"\n{await redis_note(urls.get('redis'))}")


# A short run is a few milliseconds: one run's ms/bound is mostly noise (a scheduler slice, a
# garbage collection). Runs of at most this many turns are repeated and the median is shown.
SHORT_RUN_TURNS = 30
SHORT_RUN_REPEATS = 15


async def print_amplification(
    stores: dict[str, Any], turns: int, quick: bool, langgraph: LangGraphSide | None = None
) -> None:
    width = 9 if langgraph is None else 11  # room for LangGraph's backend names
    repeats = SHORT_RUN_REPEATS if turns <= SHORT_RUN_TURNS and not quick else 1
    print(
        f"\nwrite amplification over a {turns}-turn conversation, fenced saves (as oma run):"
        "\nsnapshot = the whole snapshot at every boundary; journal = a snapshot, then one delta"
        "\nper boundary, compacted when the deltas outweigh it (docs/checkpoints.md); ms/bound ="
        "\n(run s - off run s) / boundaries"
        + (f", the median of {repeats} runs (run s: the median run)" if repeats > 1 else "")
    )
    print(
        f"{'backend':{width}} {'layout':9} {'written':>12} {'final':>9} {'ratio':>8} "
        f"{'run s':>7} {'bound.':>6} {'ms/bound':>8}"
    )
    off = statistics.median([(await amplification(None, turns)).seconds for _ in range(repeats)])
    print(f"{'off':{width}} {'-':9} {0:>12} {'-':>9} {'-':>8} {off:7.2f}  (baseline)")
    for name, make in stores.items():
        for layout in ("snapshot", "journal"):
            if layout == "journal" and name == "file":
                continue  # a file store keeps snapshots only
            if layout == "snapshot" and turns > 300 and name != "memory" and not quick:
                continue  # quadratic: gigabytes; the memory row shows the ratio
            runs = []
            for _ in range(repeats):
                store = await make()
                runs.append(await amplification(store, turns, layout))
                await close_store(store)
            run = sorted(runs, key=lambda one: one.seconds)[len(runs) // 2]
            boundaries = len(run.snapshots)
            per = (run.seconds - off) / boundaries * 1000 if boundaries else 0.0
            print(
                f"{name:{width}} {layout:9} {run.written:>12} {run.final:>9} "
                f"{run.written / run.final:>7.1f}x {run.seconds:7.2f} {boundaries:>6} {per:8.3f}"
            )
    if langgraph is not None:
        await print_langgraph(langgraph, turns)


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: turn counts are whole numbers") from None
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: each turn count is at least 2")
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and turns")
    parser.add_argument(
        "--parts",
        type=_names,
        default=PARTS,
        help=f"comma-separated, of {','.join(PARTS)} (default: both)",
    )
    parser.add_argument(
        "--backends",
        type=_names,
        default=(),
        help="comma-separated, of memory,file,redis,postgres (default: all available)",
    )
    parser.add_argument(
        "--langgraph",
        action="store_true",
        help="also LangGraph's rows in the amplification part (makes a venv on first use)",
    )
    parser.add_argument(
        "--turns",
        type=_counts,
        default=(),
        help="comma-separated turn counts for the amplification part (default: 10,300,1000)",
    )
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="conversation",
        help="the saves part's snapshots: one long conversation (default), or what a long run "
        "leaves (completed tasks, tool calls and results, a conversation)",
    )
    args = parser.parse_args()
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {','.join(sorted(unknown))}")
    wants_langgraph = args.langgraph and "amplification" in args.parts
    python = ensure_langgraph_venv() if wants_langgraph else None
    asyncio.run(main(args.quick, args.parts, args.backends, python, args.turns, args.shape))
