"""Abilities only the devcluster node agent has: kubelet-side eviction and node loss."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from devcluster import KubeClient, NodeAgent
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import pod, wait_for, wait_phase

pytestmark = pytest.mark.cluster
FOREVER = "while true; do sleep 0.2; done"


async def test_kubelet_eviction_marks_pod_evicted(
    cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    agent = cluster.agent
    path = f"/api/v1/namespaces/{namespace}/pods/hog"
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", pod("hog", FOREVER))
    await wait_phase(kube, path, {"Running"})
    await cluster.call(agent.evict_pod(namespace, "hog", "low on memory"))
    obj = await wait_phase(kube, path, {"Failed"})
    assert obj["status"]["reason"] == "Evicted"
    assert obj["status"]["message"] == "low on memory"
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["DisruptionTarget"]["status"] == "True"
    assert conds["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    term = obj["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137
    assert obj["metadata"].get("deletionTimestamp") is None  # evicted pods stay until deleted


async def _partition(agent: NodeAgent) -> None:
    agent.partition()


@pytest.mark.timeout(150)
async def test_node_loss_stops_heartbeats_but_not_processes(
    cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    agent = cluster.agent
    path = f"/api/v1/namespaces/{namespace}/pods/survivor"
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", pod("survivor", FOREVER))
    await wait_phase(kube, path, {"Running"})
    runner = agent.find(namespace, "survivor")
    assert runner is not None
    proc = runner.procs["main"]

    def ready_is(expected: str) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            node = await kube.get(f"/api/v1/nodes/{agent.name}")
            conds = node["status"]["conditions"]
            ready: str = next(c["status"] for c in conds if c["type"] == "Ready")
            return ready == expected

        return probe

    await cluster.call(_partition(agent))
    try:
        await wait_for(ready_is("Unknown"), 90, "the node to turn Ready=Unknown", 1.0)

        async def tainted() -> bool:
            node = await kube.get(f"/api/v1/nodes/{agent.name}")
            taints = node["spec"].get("taints") or []
            return any(t["key"] == "node.kubernetes.io/unreachable" for t in taints)

        await wait_for(tainted, 30, "the node lifecycle controller's unreachable taint")
        assert proc.returncode is None  # the process kept running
    finally:
        await cluster.call(agent.heal())
    await wait_for(ready_is("True"), 60, "the node to be Ready again", 1.0)
    assert proc.returncode is None
