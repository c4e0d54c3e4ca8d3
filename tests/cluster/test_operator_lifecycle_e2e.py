"""Attempts that end without a word from their pod, and what the operator reports meanwhile.

A pod that never starts ends its attempt after ``startTimeoutSeconds``. A pod on a lost node
(heartbeats stop, the process keeps running) ends its attempt ``nodeLossGraceSeconds`` after the
node controller marks it not ready; the next attempt runs on another node and the old runner,
still running, is fenced at its next save. Kubernetes Events tell each attempt's start, end and
resume; the status carries the last checkpoint time read from the store.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster, KubeClient, NodeAgent
from devcluster.binaries import k8s_version
from devcluster.kubeconfig import load_kubeconfig
from oma.timeutil import parse_iso
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import get_or_none, wait_for
from tests.cluster.test_operator_e2e import (
    TEAMRUNS,
    crds_installed,
    finished,
    ledger_entries,
    operator,
    operator_log,
    redis_secret,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
POOL_LABEL = "oma.dev/test-pool"


async def event_counts(kube: KubeClient, namespace: str, name: str) -> dict[str, int]:
    """How many times each reason was posted about the TeamRun (timestamps have 1 s steps,
    so order within a second is not known)."""
    events = await kube.get(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}"
    )
    counts: dict[str, int] = {}
    for event in events["items"]:
        if event["involvedObject"].get("kind") == "TeamRun":
            counts[event["reason"]] = counts.get(event["reason"], 0) + (event.get("count") or 1)
    return counts


@pytest.mark.timeout(180)
async def test_events_and_last_checkpoint_time_through_an_eviction(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "v1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "v2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("ev", script, ledger))

    async def first_recorded() -> bool:
        return await ledger_entries(ledger) == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    await kube.create(
        f"/api/v1/namespaces/{namespace}/pods/ev-a1/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "ev-a1", "namespace": namespace},
        },
    )
    status = await finished(kube, namespace, "ev", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    saved = parse_iso(status["lastCheckpointAt"])
    ended = parse_iso(status["attempts"][-1]["endedAt"])
    assert saved is not None and ended is not None
    assert timedelta(0) <= ended - saved < timedelta(seconds=30)  # the final save, read at the end
    assert "nextAttemptAfter" not in status  # no attempt is waiting to start
    body = await kube.get(f"{TEAMRUNS.format(ns=namespace)}/ev")
    # No operator finalizer: deleting a TeamRun (or its namespace) never waits for the operator.
    assert body["metadata"].get("finalizers") in (None, [])

    async def all_posted() -> dict[str, int] | None:
        counts = await event_counts(kube, namespace, "ev")
        return counts if "AttemptSucceeded" in counts else None

    counts = await wait_for(all_posted, 30, "the operator's events")
    expected = {"AttemptStarted": 2, "AttemptDisruption": 1, "Resumed": 1, "AttemptSucceeded": 1}
    assert {reason: counts.get(reason) for reason in expected} == expected, counts


@pytest.mark.timeout(120)
async def test_a_pod_that_never_starts_ends_its_attempt_after_the_start_timeout(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    body = teamrun("stuck", [{"text": "never asked"}], tmp_path / "ledger.jsonl")
    body["spec"]["runner"]["nodeSelector"] = {POOL_LABEL: "no-such-pool"}
    body["spec"]["retryPolicy"] |= {"startTimeoutSeconds": 10, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "stuck", 90)
    assert status["phase"] == "Failed", (status, await operator_log(operator))
    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"]) == ("crash", "StartTimeout")
    assert attempt["message"].startswith("the runner did not start within 10s: ")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailuresExhausted" and "StartTimeout" in failed["message"]

    async def pod_gone() -> bool:
        return await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/stuck-a1") is None

    await wait_for(pod_gone, 30, "the pod that never started to be deleted")


async def _start_node(local: DevCluster, name: str, pool: str) -> NodeAgent:
    client = KubeClient(load_kubeconfig(local.kubeconfig))
    agent = NodeAgent(
        client,
        local.running.control_plane.workdir,
        name,
        labels={POOL_LABEL: pool},
        heartbeat_seconds=2.0,
        version=k8s_version(),
    )
    await agent.start()
    return agent


async def _remove_node(agent: NodeAgent) -> None:
    await agent.stop()
    try:
        await agent.client.delete(f"/api/v1/nodes/{agent.name}")
    finally:
        await agent.client.aclose()


async def _partition(agent: NodeAgent) -> None:
    agent.partition()


def _runner_exit(agent: NodeAgent, namespace: str, pod: str) -> int | None:
    runner = agent.find(namespace, pod)
    return None if runner is None else runner.containers["runner"].exit_code


@pytest.mark.timeout(300)
async def test_node_loss_starts_the_next_attempt_elsewhere_and_fences_the_old_runner(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    tmp_path: Path,
) -> None:
    cluster.agent  # noqa: B018 (node-agent-only: skips with E2E_CLUSTER=existing)
    assert cluster.local is not None
    pool = uuid.uuid4().hex[:8]
    lost = await cluster.call(_start_node(cluster.local, f"lost-{pool}", pool))
    spare: NodeAgent | None = None
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "n1", "name": "ledger_append", "input": {"entry": "first"}}]},
        # long enough for the node controller (20 s), the grace (3 s) and a new runner's claim
        {"tool_calls": [{"id": "n2", "name": "wait", "input": {"seconds": 45}}]},
        {"tool_calls": [{"id": "n3", "name": "ledger_append", "input": {"entry": "second"}}]},
        {"text": "done"},
    ]
    body = teamrun("loss", script, ledger)
    body["spec"]["runner"]["nodeSelector"] = {POOL_LABEL: pool}
    body["spec"]["retryPolicy"]["nodeLossGraceSeconds"] = 3
    try:
        await kube.create(TEAMRUNS.format(ns=namespace), body)

        async def first_recorded() -> bool:
            return await ledger_entries(ledger) == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        await cluster.call(_partition(lost))  # the process keeps running, the node goes silent
        spare = await cluster.call(_start_node(cluster.local, f"spare-{pool}", pool))
        status = await finished(kube, namespace, "loss", 200)
        assert status["phase"] == "Succeeded", (status, await operator_log(operator))
        assert status["attempt"] == 2
        first = status["attempts"][0]
        assert (first["outcome"], first["reason"]) == ("disruption", "NodeLost")
        assert f"node lost-{pool} stopped reporting" in first["message"]
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/loss-a2")
        assert pod["spec"]["nodeName"] == f"spare-{pool}"
        assert await ledger_entries(ledger) == ["first", "second"]

        async def old_runner_fenced() -> bool:
            return _runner_exit(lost, namespace, "loss-a1") is not None

        # The old runner finishes its wait, tries to commit, and finds attempt 2 owns the run.
        await wait_for(old_runner_fenced, 60, "the old runner to stop")
        assert _runner_exit(lost, namespace, "loss-a1") == 12  # EXIT_FENCED
    finally:
        for agent in (lost, spare):
            if agent is not None:
                await cluster.call(_remove_node(agent))


@pytest.mark.timeout(240)
async def test_deleting_a_running_teamrun_removes_its_pod(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": 30}}]},
        {"text": "never reached"},
    ]
    await kube.create(
        TEAMRUNS.format(ns=namespace), teamrun("gone", script, tmp_path / "ledger.jsonl")
    )
    pod_path = f"/api/v1/namespaces/{namespace}/pods/gone-a1"

    async def running() -> bool:
        pod = await get_or_none(kube, pod_path)
        return pod is not None and pod["status"].get("phase") == "Running"

    await wait_for(running, 60, "the runner pod to run")
    await kube.delete(f"{TEAMRUNS.format(ns=namespace)}/gone")

    async def all_gone() -> bool:
        teamrun_left = await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/gone")
        return teamrun_left is None and await get_or_none(kube, pod_path) is None

    # The garbage collector deletes the owned pod (once it watches the new CRD's resources:
    # up to about a minute here), the runner drains or is killed after its grace period
    # (20 s), and the operator lets go of the pod.
    await wait_for(all_gone, 150, "the TeamRun and its pod to be gone", 1.0)
