"""A run under repeated disruption: its runner evicted every few seconds, and the operator
killed and restarted at random moments; it completes with exactly the uninterrupted result.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import evict, get_or_none, runner_pods, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    operator,
    redis_secret,
    status_of,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, operating

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
ENTRIES = [f"entry-{n}" for n in range(1, 13)]


def _churn_teamrun(name: str, prefix: str, effects: SideEffects) -> dict[str, Any]:
    body = teamrun(name, _script(prefix), effects)
    body["spec"]["retryPolicy"]["maxDisruptions"] = 100
    # 13 model turns: over the default maxTurns (10), which would end the task early.
    body["spec"]["team"]["agents"][0]["maxTurns"] = len(ENTRIES) + 1
    return body


def _script(prefix: str) -> list[dict[str, Any]]:
    """One ledger entry per model turn, each turn taking a second."""
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": f"{prefix}{n}", "name": "ledger_append", "input": {"entry": entry}}
            ],
            "delay": 1,
        }
        for n, entry in enumerate(ENTRIES, start=1)
    ]
    return [*turns, {"text": "all recorded"}]


async def _evict(kube: KubeClient, namespace: str, pod: str) -> bool:
    try:
        await evict(kube, namespace, pod)
    except Exception:  # the pod ended or is already going: the next round finds the new one
        return False
    return True


async def _progressed(
    kube: KubeClient, namespace: str, name: str, effects: SideEffects, entries: int
) -> None:
    """Return once TeamRun ``name`` has recorded ``entries`` more ledger entries from now (or
    all of them), or has ended."""
    goal = min(len(await effects.ledger()) + entries, len(ENTRIES))

    async def recorded() -> bool:
        if len(await effects.ledger()) >= goal:
            return True
        return (await status_of(kube, namespace, name)).get("phase") in ("Succeeded", "Failed")

    await wait_for(recorded, 60, f"{name} to record {entries} more ledger entries")


@pytest.mark.timeout(420)
async def test_a_runner_evicted_every_few_seconds_still_completes_exactly_once(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    body = _churn_teamrun("churn", "c", effects)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    evicted: list[str] = []
    deadline = time.monotonic() + 360
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = await status_of(kube, namespace, "churn")
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        name = f"churn-a{status.get('attempt', 1)}"
        pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{name}")
        running = pod is not None and pod["status"].get("phase") == "Running"
        going = pod is not None and pod["metadata"].get("deletionTimestamp")
        if running and not going and name not in evicted:
            await _progressed(kube, namespace, "churn", effects, 2)  # some progress first
            if await _evict(kube, namespace, name):
                evicted.append(name)
        await asyncio.sleep(0.5)  # the next look at the run (a poll, not an ordering)
    assert status.get("phase") == "Succeeded", status
    print(f"evicted {evicted}")
    assert len(evicted) >= 3, evicted  # the run really was disrupted, repeatedly
    assert status["disruptions"] >= len(evicted) - 1  # the last eviction may meet a finished run
    assert await effects.ledger() == ENTRIES  # nothing lost, nothing twice


@pytest.mark.timeout(420)
async def test_operator_killed_at_random_moments_neither_duplicates_nor_loses_attempts(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("OMA_CHAOS_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    body = _churn_teamrun("chaos", "o", effects)
    log = tmp_path / "operator.log"
    kills = evictions = 0
    status: dict[str, Any] = {}
    # One operator killed (SIGKILL) and replaced by a new pod every few seconds: with leader
    # election (the chart's default) each new pod would wait out its predecessor's Lease (10 s)
    # and be killed before it ever acted. Hand-overs under kills are test_leader_handover_e2e's.
    election_off = ("operator.leaderElection.enabled=false",)
    settings = OperatorSettings(progress_seconds=1, chart_values=election_off)
    async with operating(cluster, kube, namespace, log, settings) as operator:
        await kube.create(TEAMRUNS.format(ns=namespace), body)
        deadline = time.monotonic() + 360
        while time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(1.0, 5.0))
            status = await status_of(kube, namespace, "chaos")
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            await operator.kill()  # SIGKILL: no cleanup, at whatever the operator was doing
            kills += 1
            if rng.random() < 0.5:  # sometimes the runner goes too while the operator is away
                pod = f"chaos-a{status.get('attempt', 1)}"
                evictions += await _evict(kube, namespace, pod)
            await asyncio.sleep(rng.uniform(0.0, 2.0))
            await operator.start()
    context = (
        f"seed {seed} (rerun with OMA_CHAOS_SEED={seed}), {kills} kills, {evictions} evictions"
    )
    assert status.get("phase") == "Succeeded", (context, status, log.read_text()[-3000:])
    assert kills >= 2, context
    attempts = [a["attempt"] for a in status["attempts"]]
    assert attempts == list(range(1, status["attempt"] + 1)), (context, attempts)  # once each
    # Evicted pods are gone by now.
    names = {p["metadata"]["name"] for p in await runner_pods(kube, namespace)}
    assert names <= {f"chaos-a{n}" for n in attempts}, (context, names)  # no extra attempt
    assert await effects.ledger() == ENTRIES, context
