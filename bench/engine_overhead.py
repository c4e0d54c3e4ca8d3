"""Engine overhead of checkpointing: small tasks with a zero-latency scripted model, off vs on.

    .venv/bin/python bench/engine_overhead.py [--quick] [--tasks N] [--per-run M]
                                              [--backends memory,file,redis,postgres] [--fence]

Runs ``--tasks`` small tasks (default 1,000) as runs of ``--per-run`` tasks each (default 100,
``max_concurrency`` 5). Each task is two model turns with one tool call in between, so it passes
five durable boundaries (tool calls persisted, tool result committed, results appended, final
answer, task completed). The same runs are timed with checkpointing off (baseline) and then on
per backend, in one process, alternating; Redis and PostgreSQL are started as child processes.
Prints the wall time per task, the checkpoint cost per task and per durable boundary
((on - off) / boundaries, counted by a wrapper of the store), and the mean snapshot size.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import (
    BACKENDS,
    CountingStore,
    StoreFactory,
    backends,
    header,
    parse_backends,
)
from pydantic import BaseModel

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import MemoryStore
from oma.store.base import close_store
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool


class LookupInput(BaseModel):
    query: str


async def lookup(args: LookupInput, ctx: ToolContext) -> str:
    return f"result for {args.query}"


def make_team() -> Team:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "lookup", "input": {"query": "small"}}]},
        {"text": "done: the lookup found what the task needed."},
    ]
    agent = AgentConfig(
        name="worker",
        adapter=ScriptedAdapter(script),
        tools=[define_tool("lookup", "Look something up.", LookupInput, lookup)],
        max_turns=4,
    )
    return Team(name="bench", agents=[agent])


def task_specs(count: int, offset: int) -> list[dict[str, Any]]:
    return [
        {"title": f"Task {offset + i}", "description": "A small task.", "assignee": "worker"}
        for i in range(count)
    ]


async def one_run(
    count: int, offset: int, store: MemoryStore | None, run_id: str, fence: bool = False
) -> tuple[float, int]:
    """Seconds for one run of ``count`` tasks (checkpointing to ``store`` if given)."""
    team = make_team()
    # The snapshot layout, whose writes ``CountingStore`` counts (the reference's layout;
    # library runs default to the journal since issue 47: bench/checkpoint_overhead.py).
    options = (
        CheckpointOptions(store=store, run_id=run_id, fence=fence, journal=False)
        if store is not None
        else None
    )
    started = time.perf_counter()
    result = await OpenMultiAgent().run_tasks(team, task_specs(count, offset), checkpoint=options)
    elapsed = time.perf_counter() - started
    assert result.success, result.status
    return elapsed, len(result.tasks)


async def all_runs(
    tasks: int, per_run: int, make: StoreFactory | None, fence: bool = False
) -> tuple[float, int, int]:
    """Total seconds, boundaries and snapshot chars written for ``tasks`` tasks."""
    total = 0.0
    boundaries = written = 0
    for index, offset in enumerate(range(0, tasks, per_run)):
        count = min(per_run, tasks - offset)
        if make is None:
            elapsed, _ = await one_run(count, offset, None, f"off-{index}")
        else:
            inner = await make()
            counting = CountingStore(inner)
            elapsed, _ = await one_run(count, offset, counting, f"on-{index}", fence)
            boundaries += counting.boundaries
            written += counting.written
            await close_store(inner)
        total += elapsed
    return total, boundaries, written


async def main(args: argparse.Namespace) -> None:
    tasks, per_run, rounds = args.tasks, args.per_run, args.rounds
    print(header("engine overhead", args.quick))
    print(
        f"{tasks} tasks in runs of {per_run} (max_concurrency 5), scripted model (zero latency),"
        " 1 tool call per task; best of "
        f"{rounds} rounds; off = checkpointing disabled, measured in the same process"
        f"{'; on = fenced (as oma run and the runner)' if args.fence else ''}\n"
    )
    print(
        f"{'backend':9} {'off s':>7} {'on s':>7} {'ratio':>6}  {'off/task':>9} {'on/task':>9}  "
        f"{'ckpt/task':>9} {'bound.':>7} {'ckpt/bound':>10} {'snap avg':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="oma-bench-") as tmp:
        async with backends(Path(tmp), args.backends) as stores:
            await all_runs(min(tasks, 2 * per_run), per_run, None)  # warm-up (imports, caches)
            for name, make in stores.items():
                offs: list[float] = []
                ons: list[float] = []
                boundaries = written = 0
                for _ in range(rounds):  # alternate, so drift hits both the same way
                    off, _, _ = await all_runs(tasks, per_run, None)
                    on, boundaries, written = await all_runs(tasks, per_run, make, args.fence)
                    offs.append(off)
                    ons.append(on)
                off, on = min(offs), min(ons)
                per_task_ms = (on - off) / tasks * 1000
                per_boundary_ms = (on - off) / boundaries * 1000 if boundaries else 0.0
                print(
                    f"{name:9} {off:7.2f} {on:7.2f} {on / off:5.1f}x  "
                    f"{off / tasks * 1000:7.3f}ms {on / tasks * 1000:7.3f}ms  "
                    f"{per_task_ms:7.3f}ms {boundaries:>7} {per_boundary_ms:8.3f}ms "
                    f"{written / max(boundaries, 1) / 1000:7.1f}KB"
                )
                if len(offs) > 1:
                    spread = statistics.pstdev(ons) / statistics.mean(ons) * 100
                    print(f"{'':9} (on: {len(ons)} rounds, spread {spread:.0f}% of the mean)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 tasks, memory and file only")
    parser.add_argument("--tasks", type=int, default=None, help="tasks in total (default 1000)")
    parser.add_argument("--per-run", type=int, default=None, help="tasks per run (default 100)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 2)")
    parser.add_argument("--backends", type=parse_backends, default=None, help="comma-separated")
    parser.add_argument(
        "--fence",
        action="store_true",
        help="fenced checkpoints (compare-and-set saves, a read before each tool), as oma run",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks = args.tasks or 40
        args.per_run = args.per_run or 20
        args.rounds = args.rounds or 1
        args.backends = args.backends or ["memory", "file"]
    args.tasks = args.tasks or 1000
    args.per_run = args.per_run or 100
    args.rounds = args.rounds or 2
    args.backends = args.backends or list(BACKENDS)
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
