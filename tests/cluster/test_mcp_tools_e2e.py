"""A TeamRun whose agent uses a real MCP server (``oma.tools.mcp.counter_server``, built with
the SDK, started over stdio inside the runner image) while its runner is evicted after each call it
makes: every call reaches the server under one key on every attempt, and each takes effect
once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis

from devcluster import KubeClient
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import evict, get_or_none
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    operator,
    redis_secret,
    status_of,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
CALLS = 8


def _teamrun(name: str, effects: SideEffects, redis_for_pods: str, prefix: str) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": f"a-{n}", "name": "counter__add", "input": {"counter": "n", "amount": n}}
            ],
            "delay": 1,
        }
        for n in range(1, CALLS + 1)
    ]
    body = teamrun(name, [*turns, {"text": "counted"}], effects)
    agent = body["spec"]["team"]["agents"][0]
    agent["maxTurns"] = CALLS + 1
    agent["mcpServers"] = [
        {
            "name": "counter",
            "command": ["python", "-m", "oma.tools.mcp.counter_server", "--stdio"],
            "env": {"MCP_COUNTER_REDIS_URL": redis_for_pods, "MCP_COUNTER_PREFIX": prefix},
            "tools": ["add"],
        }
    ]
    body["spec"]["retryPolicy"]["maxDisruptions"] = 100
    return body


async def _calls(db: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in await db.lrange(f"{prefix}:calls", 0, -1)]


@pytest.mark.timeout(420)
async def test_mcp_calls_survive_evictions_once_each_under_one_key(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    prefix = f"mcp-e2e:{uuid.uuid4().hex[:8]}"
    body = _teamrun("tools", effects, e2e_redis.for_pods, prefix)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    db = redis.Redis.from_url(e2e_redis.for_tests)
    evicted: list[str] = []
    seen_calls = 0
    status: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 360
        while time.monotonic() < deadline:
            status = await status_of(kube, namespace, "tools")
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            calls = await _calls(db, prefix)
            name = f"tools-a{status.get('attempt', 1)}"
            pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{name}")
            running = pod is not None and pod["status"].get("phase") == "Running"
            if running and len(calls) > seen_calls and name not in evicted:
                seen_calls = len(calls)
                try:  # a call reached the server: evict the runner in the middle of its task
                    await evict(kube, namespace, name)
                    evicted.append(name)
                except Exception:  # ended or already going: the next look finds the new one
                    pass
            await asyncio.sleep(0.3)  # the next look at the run (a poll, not an ordering)
        calls = await _calls(db, prefix)
        total = int(await db.get(f"{prefix}:counter:n") or 0)
    finally:
        await db.aclose()
    said = [a.get("message") for a in status.get("attempts", [])]
    assert status.get("phase") == "Succeeded", said
    assert len(evicted) >= 3, evicted
    keys = Counter(call["key"] for call in calls)
    run_id = body["spec"]["runId"]
    ids = sorted(key.rsplit(":", 1)[1] for key in keys)
    assert ids == sorted(f"a-{n}" for n in range(1, CALLS + 1)), keys
    assert all(key.startswith(f"{run_id}:") for key in keys), keys
    assert len({key.rsplit(":", 1)[0] for key in keys}) == 1  # one task id, every attempt
    assert total == sum(range(1, CALLS + 1))  # each add took effect once, re-sent or not
    print(f"evicted {evicted}; calls per key {dict(keys)}")
