"""A TeamRun whose agent calls a real MCP server running in its own pod (the counter server,
built with the SDK) over streamable HTTP, evicted (Eviction API, grace period 0: killed at
once) right after durable boundaries of a 20-call run, 35 times or more: the test watches the
run's journal and evicts the runner as soon as it saved a boundary past its claim, while its
next step (a tool call the server answers a second after its effect, a model turn of a second)
is under way. Then:

- every ``add`` (``idempotentHint``) reaches the server under one key on every attempt and takes
  effect once by that key, however often it was sent;
- every ``pay`` (destructive, not idempotent) pays exactly once: one whose runner was killed
  between its "started" mark and its commit reaches a reviewer (an uncertain_tool_call
  ApprovalDecision), who settles it from what the server shows, and it is never run again
  silently. The first pay is made certain to be such a call: the server holds its answer
  ``HELD_SECONDS`` after paying, and the test evicts the runner as soon as the server shows
  the payment (its mark was saved before the call was sent).
"""

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
from oma.checkpoint.keys import checkpoint_key
from tests.cluster.approval_kit import DECISIONS, admission_policies, as_user, grant_reviewers
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import REAL_NODE, REAL_NODE_IMAGE, Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import get_or_none, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    operator,
    redis_secret,
    status_of,
    teamrun,
)

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not REAL_NODE,
        reason="the node agent runs runner processes only, not a server image in a pod of its "
        "own: this needs the real node (kubelet + containerd)",
    ),
]
CALLS = 20
PAYS = (5, 10, 15, 20)  # the calls that pay; the others add
PORT = 8765
HELD = PAYS[0]  # the pay whose runner is evicted while the server holds its answer
HELD_SECONDS = 12  # well inside the call's timeout (30 s), well past an eviction under load


def _turn(n: int) -> dict[str, Any]:
    """Call n, answered by the model after a second; the server applies the call at once and
    answers a second later: a kill lands in one of the two."""
    if n in PAYS:
        held = HELD_SECONDS if n == HELD else 1
        pay = {"to": "bob", "amount": n, "acknowledge_seconds": held}
        call = {"id": f"p-{n}", "name": "counter__pay", "input": pay}
    else:
        add = {"counter": "n", "amount": n, "acknowledge_seconds": 1}
        call = {"id": f"a-{n}", "name": "counter__add", "input": add}
    return {"tool_calls": [call], "delay": 1}


def _server_pod(redis_for_pods: str, prefix: str) -> dict[str, Any]:
    command = ["python", "-m", "oma.tools.mcp.counter_server", "--host", "0.0.0.0"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "counter", "labels": {"app": "mcp-counter"}},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": REAL_NODE_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": [*command, "--port", str(PORT)],
                    "env": [
                        {"name": "MCP_COUNTER_REDIS_URL", "value": redis_for_pods},
                        {"name": "MCP_COUNTER_PREFIX", "value": prefix},
                    ],
                    "ports": [{"containerPort": PORT}],
                }
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }


async def _evict_now(kube: KubeClient, namespace: str, pod: str) -> bool:
    """Evict ``pod`` with a grace period of 0 (killed at once); False if it was already going."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
        "deleteOptions": {"gracePeriodSeconds": 0},
    }
    try:
        await kube.create(f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body)
    except Exception:
        return False
    return True


async def _calls(db: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in await db.lrange(f"{prefix}:calls", 0, -1)]


async def _settle_uncertain(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, calls: list[dict[str, Any]]
) -> Counter[str]:
    """Decide every pending uncertain call as its reviewer would: Done when the server shows
    the payment under the call's key, Retry when it never got the call."""
    listed = await kube.get(DECISIONS.format(ns=namespace), labelSelector="oma.dev/teamrun=evicted")
    settled: Counter[str] = Counter()
    async with as_user(cluster, "rita") as rita:
        for decision in listed.get("items", []):
            spec, status = decision["spec"], decision.get("status") or {}
            if status.get("decision") != "Pending" or not status.get("verified"):
                continue
            assert spec["scope"] == "uncertain_tool_call", spec  # no other request is made
            call_id = json.loads(spec["content"])["toolCallId"]
            paid = any(c["tool"] == "pay" and c["key"].endswith(f":{call_id}") for c in calls)
            patch: dict[str, Any] = {"decision": "Approved", "reviewer": "rita"}
            if paid:
                patch = {**patch, "decision": "Rejected", "resolution": "Done"}
                patch["result"] = f"paid: the server shows {call_id}"
            path = f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}"
            await rita.patch(path, {"spec": patch})
            settled["done" if paid else "retry"] += 1
    return settled


@pytest.mark.timeout(900)
async def test_a_20_call_mcp_run_evicted_at_every_boundary_applies_each_effect_once(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "rita")
    prefix = f"mcp-evict:{uuid.uuid4().hex[:8]}"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(pods, _server_pod(e2e_redis.for_pods, prefix))

    async def address() -> str | None:
        pod = await get_or_none(kube, f"{pods}/counter")
        status = (pod or {}).get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    ip = await wait_for(address, 120, "the MCP server's pod")
    body = teamrun("evicted", [*(_turn(n) for n in range(1, CALLS + 1)), {"text": "all done"}])
    body["spec"]["runner"]["env"] = effects.env()
    agent = body["spec"]["team"]["agents"][0]
    agent["maxTurns"] = CALLS + 1
    agent["mcpServers"] = [
        {"name": "counter", "url": f"http://{ip}:{PORT}/mcp", "tools": ["add", "pay"]}
    ]
    body["spec"]["retryPolicy"] = {"backoffSeconds": 1, "maxDisruptions": 500, "maxFailures": 20}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    store = teamrun_store(e2e_redis, body, namespace)
    key = checkpoint_key(body["spec"]["runId"])
    db = redis.Redis.from_url(e2e_redis.for_tests)
    evicted: list[str] = []
    settled: Counter[str] = Counter()
    status: dict[str, Any] = {}
    evicted_at: str | None = None  # the journal's version when the last attempt was evicted
    held_evicted = False
    try:
        deadline = time.monotonic() + 780
        while time.monotonic() < deadline:
            status = await status_of(kube, namespace, "evicted")
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            if status.get("phase") == "AwaitingApproval":
                seen = await _calls(db, prefix)
                settled += await _settle_uncertain(cluster, kube, namespace, seen)
            attempt = int(status.get("attempt") or 1)
            name = f"evicted-a{attempt}"
            pod = await get_or_none(kube, f"{pods}/{name}")
            if pod is None or pod["status"].get("phase") != "Running" or name in evicted:
                await asyncio.sleep(0.1)
                continue
            if not held_evicted:  # the server paid p-HELD and holds its answer: evict now
                seen = await _calls(db, prefix)
                if any(c["key"].endswith(f":p-{HELD}") for c in seen):
                    if await _evict_now(kube, namespace, name):
                        evicted.append(name)
                        held_evicted = True
                    await asyncio.sleep(0.1)
                    continue
            head = await store.journal_head(key)
            # A boundary past the attempt's claim: a journal's base is two records (a claim
            # writes a new one), so the first attempt's first save shows 2, a later one's first
            # boundary 3. A journal unchanged since the last eviction is that attempt's.
            fresh = head is not None and head.version != evicted_at
            saved = fresh and head is not None and head.records >= (2 if attempt == 1 else 3)
            if saved and await _evict_now(kube, namespace, name):
                evicted.append(name)
                evicted_at = head.version if head is not None else None
            await asyncio.sleep(0.1)  # the next look (a poll, not an ordering)
        calls = await _calls(db, prefix)
        added = int(await db.get(f"{prefix}:counter:n") or 0)
        paid = int(await db.get(f"{prefix}:paid:bob") or 0)
    finally:
        await db.aclose()
        await store.aclose()
    print(f"\n{len(evicted)} evictions; uncertain calls settled: {dict(settled)}; calls: ")
    print(Counter(call["key"].rsplit(":", 1)[1] for call in calls))
    said = [(a.get("outcome"), a.get("message")) for a in status.get("attempts", [])][-5:]
    assert status.get("phase") == "Succeeded", said
    assert len(evicted) >= 35, evicted
    run_id = body["spec"]["runId"]
    by_id: dict[str, set[str]] = {}
    for call in calls:
        assert call["key"].startswith(f"{run_id}:"), call
        by_id.setdefault(call["key"].rsplit(":", 1)[1], set()).add(call["key"])
    adds = [f"a-{n}" for n in range(1, CALLS + 1) if n not in PAYS]
    assert sorted(by_id) == sorted([*adds, *(f"p-{n}" for n in PAYS)]), sorted(by_id)
    assert all(len(keys) == 1 for keys in by_id.values())  # one key per call, every attempt
    assert added == sum(n for n in range(1, CALLS + 1) if n not in PAYS)  # each add once
    pays = Counter(c["key"].rsplit(":", 1)[1] for c in calls if c["tool"] == "pay")
    assert pays == Counter({f"p-{n}": 1 for n in PAYS}), pays  # never paid twice
    assert paid == sum(PAYS)
    assert held_evicted  # the runner was killed between p-HELD's mark and its commit: so
    assert settled["done"] >= 1, settled  # a reviewer saw it paid and settled it Done
