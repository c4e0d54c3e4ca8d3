"""The processes of the cross-process compare-and-set race (run by test_cas_race.py).

Usage: ``python -m tests.stores.cas_racer redis|postgres TARGET NAME PROCESSES PER_PROCESS``.
This launcher imports everything once, then forks PROCESSES children (fork, so start-up costs
one import, not one per process). Each child connects, waits at a barrier until all are
connected, fires PER_PROCESS concurrent swaps on each of two keys, and reports its results;
the launcher prints them as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sys
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from oma.store import CompareAndSetStore

PENDING = '{"decision":"pending"}'


def _open(backend: str, target: str, name: str) -> CompareAndSetStore:
    if backend == "redis":
        from oma.store.redis import RedisStore

        return RedisStore(target, namespace=name)
    from oma.store.postgres import PostgresStore

    return PostgresStore(target, table=name, max_size=10)


async def _race(
    backend: str, target: str, name: str, racer: str, count: int, barrier: Barrier
) -> dict[str, Any]:
    store = _open(backend, target, name)
    try:
        await store.get("warm-up")  # connected before the barrier, not inside the race
        await asyncio.to_thread(barrier.wait, 60)
        decisions = [f'{{"decision":"approved","by":"{racer}-{i}"}}' for i in range(count)]
        results = await asyncio.gather(
            *(store.compare_and_set("absent", None, d) for d in decisions),
            *(store.compare_and_set("pending", PENDING, d) for d in decisions),
        )
        return {"racer": racer, "absent": results[:count], "swap": results[count:]}
    finally:
        await store.aclose()  # type: ignore[attr-defined]


def _child(
    backend: str, target: str, name: str, racer: str, count: int, barrier: Barrier, out: Queue[Any]
) -> None:
    out.put(asyncio.run(_race(backend, target, name, racer, count, barrier)))


def main(backend: str, target: str, name: str, processes: int, count: int) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    out: Queue[Any] = context.Queue()
    children = [
        context.Process(target=_child, args=(backend, target, name, str(i), count, barrier, out))
        for i in range(processes)
    ]
    for child in children:
        child.start()
    results = [out.get(timeout=90) for _ in children]
    for child in children:
        child.join(timeout=30)
    if any(child.exitcode != 0 for child in children):
        raise SystemExit(f"racer exit codes: {[child.exitcode for child in children]}")
    print(json.dumps(results))


if __name__ == "__main__":
    backend, target, name, processes, count = sys.argv[1:6]
    main(backend, target, name, int(processes), int(count))
