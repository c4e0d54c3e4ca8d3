"""Compare-and-set across processes: 50 decisions from 5 processes, exactly one wins.

This is what fencing and durable approvals rely on: separate runner pods (or a runner and a
reviewer) deciding on the same key at the same moment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from oma.store import CompareAndSetStore, PostgresStore, RedisStore
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer
from tests.stores.cas_racer import PENDING
from tests.stores.conftest import unique_name

PROCESSES = 5
PER_PROCESS = 10  # 5 x 10 = 50 racing decisions per key, from separate processes
ROOT = Path(__file__).resolve().parents[2]
Result = dict[str, Any]  # {"racer": str, "absent": [bool], "swap": [bool]}


def _race(backend: str, target: str, name: str) -> list[Result]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    command = [sys.executable, "-m", "tests.stores.cas_racer", backend, target, name]
    done = subprocess.run(
        [*command, str(PROCESSES), str(PER_PROCESS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[Result] = json.loads(done.stdout)
    assert sorted(r["racer"] for r in results) == [str(i) for i in range(PROCESSES)]
    return results


async def _check(store: CompareAndSetStore, results: list[Result]) -> None:
    for key in ("absent", "swap"):
        wins = [
            f"{result['racer']}-{i}"
            for result in results
            for i, won in enumerate(result[key])
            if won
        ]
        assert len(wins) == 1, f"{key}: winners {wins}"
        entry = await store.get("absent" if key == "absent" else "pending")
        assert entry is not None and f'"by":"{wins[0]}"' in entry.value


async def test_redis_cas_race_across_processes(redis_server: RedisServer) -> None:
    namespace = unique_name("race")
    async with RedisStore(redis_server.url, namespace=namespace) as store:
        await store.set("pending", PENDING)
        results = _race("redis", redis_server.url, namespace)
        await _check(store, results)


async def test_postgres_cas_race_across_processes(postgres_server: PostgresServer) -> None:
    table = unique_name("race")
    async with PostgresStore(postgres_server.dsn(), table=table) as store:
        await store.set("pending", PENDING)
        results = _race("postgres", postgres_server.dsn(), table)
        await _check(store, results)
