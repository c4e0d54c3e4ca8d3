"""50 decisions racing from separate processes on Redis and PostgreSQL: exactly one wins."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from oma.approval import DurableApprovalLedger, create_approval_request, get_approval_record
from oma.store import PostgresStore, RedisStore, open_store
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

RACER = Path(__file__).with_name("approval_racer.py")
PROCESSES, TRIES = 10, 5  # 50 decisions


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["redis", "postgres"])
async def test_fifty_decisions_from_ten_processes_one_winner(
    backend: str, request: pytest.FixtureRequest
) -> None:
    # The racers open the store from its URL alone, so all use the default namespace/table;
    # a fresh run id keeps this request apart from any other.
    if backend == "redis":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        url = redis_server.url
    else:
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        url = pg.dsn()
    store = open_store(url)
    decided = create_approval_request(
        run_id=f"race-{uuid.uuid4().hex[:8]}",
        scope="task_dispatch",
        boundary="t1",
        content={
            "kind": "task_dispatch",
            "task": {
                "id": "t1",
                "title": "Deploy",
                "description": "d",
                "status": "pending",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "updatedAt": "2026-01-01T00:00:00.000Z",
            },
        },
    )
    await DurableApprovalLedger(store).ensure_request(decided)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    racers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(RACER),
            url,
            decided.id,
            decided.request_hash,
            f"p{n}",
            str(TRIES),
            stdout=subprocess.PIPE,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    outputs: list[Any] = await asyncio.gather(*(racer.communicate() for racer in racers))
    assert [racer.returncode for racer in racers] == [0] * PROCESSES
    outcomes = [word for out, _ in outputs for word in out.decode().split()]
    assert len(outcomes) == PROCESSES * TRIES
    assert outcomes.count("won") == 1
    assert set(outcomes) == {"won", "APPROVAL_CONFLICT"}
    record = await get_approval_record(store, decided.id)
    assert record is not None and record.decision is not None
    assert isinstance(store, RedisStore | PostgresStore)
    await store.aclose()
