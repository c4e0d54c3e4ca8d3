"""``oma run`` with a real MCP server, SIGKILLed before and after every store write of the run
(every durable boundary), then run again until it ends: an idempotent tool's effect lands once
by its key, the server sees the same key on every attempt, and a non-idempotent call is never
run twice: a restart that cannot tell whether it ran puts it to a reviewer (exit 10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from oma.pod_contract import Exit
from tests.servers.mcp_counter import McpCounterServer
from tests.servers.redis_server import RedisServer

SCRIPT = [
    {
        "tool_calls": [
            {"id": "a-1", "name": "counter__add", "input": {"counter": "apples", "amount": 1}},
            {"id": "a-2", "name": "counter__add", "input": {"counter": "pears", "amount": 2}},
        ]
    },
    {"tool_calls": [{"id": "p-1", "name": "counter__pay", "input": {"to": "bob", "amount": 5}}]},
    {"text": "paid"},
]


@pytest.fixture
def counter(redis_server: RedisServer) -> Iterator[McpCounterServer]:
    with McpCounterServer(redis_server.url) as server:
        yield server


def _oma_run(spec: Path, run_id: str, work: Path, **env: str) -> int:
    argv = [sys.executable, "-m", "oma", "run", str(spec), "--run-id", run_id]
    argv += ["--store", str(work / f"{run_id}.json")]
    done = subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, timeout=120, check=False
    )
    assert done.returncode != Exit.PERMANENT, done.stderr.decode()[-2000:]
    return done.returncode


@pytest.mark.crash
@pytest.mark.timeout(900)
def test_kills_at_every_boundary_never_repeat_an_effect(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    agent = {
        "name": "clerk",
        "model": {"provider": "scripted", "script": SCRIPT},
        "mcpServers": [{"name": "counter", "url": counter.url}],
    }
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"agents": [agent], "tasks": [{"title": "Pay", "description": "Pay bob."}]})
    )
    writes = tmp_path / "writes.jsonl"
    assert _oma_run(spec, "clean", tmp_path, OMA_FAULT_LOG=str(writes)) == Exit.OK
    boundaries = len(writes.read_text().splitlines())
    assert boundaries >= 6

    kills = reviewed = reran = 0
    for n in range(1, boundaries + 1):
        for when in ("before", "after"):
            run_id = f"k{n}-{when}"
            code = _oma_run(spec, run_id, tmp_path, OMA_FAULT_KILL_AT=f"{n}:{when}")
            kills += code == -9
            while code not in (Exit.OK, Exit.SUSPENDED):
                code = _oma_run(spec, run_id, tmp_path)
            reviewed += code == Exit.SUSPENDED
            reran += _check(counter, run_id, suspended=code == Exit.SUSPENDED)
    assert kills >= 2 * boundaries - 2, kills  # the last write's "after" may be past the run
    assert reviewed >= 1  # a kill between pay's started mark and its commit reached a reviewer
    assert reran >= 1  # a kill between an add and its commit: sent again, under the same key
    print(
        f"\n{kills} kills at {boundaries} boundaries; {reran} runs sent an add again by its key, "
        f"{reviewed} put pay to a reviewer"
    )


def _check(counter: McpCounterServer, run_id: str, *, suspended: bool) -> bool:
    """Whether an add was sent more than once (always by the same key)."""
    calls = [call for call in counter.calls() if call["key"].startswith(f"{run_id}:")]
    sent = [call["key"] for call in calls if call["tool"] == "add"]
    adds = set(sent)
    # Two calls, each under one key on every attempt: <run>:<task>:a-1 and :a-2.
    assert sorted(key.rsplit(":", 1)[1] for key in adds) == ["a-1", "a-2"], calls
    assert len({key.rsplit(":", 1)[0] for key in adds}) == 1
    pays = [call for call in calls if call["tool"] == "pay"]
    assert len(pays) <= 1, f"{run_id}: pay ran {len(pays)} times"
    if not suspended:
        assert len(pays) == 1, f"{run_id}: the run ended without paying"
    return len(sent) > len(adds)
