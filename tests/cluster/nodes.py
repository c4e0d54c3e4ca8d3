"""More nodes for a test, of whichever kind the cluster runs: node agents, or real nodes
(kubelet + containerd) inside the sandbox. Faults are each kind's own: a node agent stops
heartbeating, a real node's kubelet is stopped (SIGSTOP) while its containers go on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from devcluster import DevCluster, KubeClient, NodeAgent
from devcluster.binaries import k8s_version
from devcluster.kubeconfig import load_kubeconfig
from devcluster.realnode import RealNode
from tests.cluster.conftest import ClusterHandle


@dataclass
class ExtraNode:
    name: str
    agent: NodeAgent | None = None
    real: RealNode | None = None

    async def runner_status(self, kube: KubeClient, namespace: str, pod: str) -> str | None:
        """How the pod's runner ended as the node itself saw it (the API cannot tell while the
        node is away): the runner's termination report's status, or for a node agent's
        process ``exit <code>``. None while it runs."""
        if self.real is not None:
            body = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
            report = self.real.termination_report(body["metadata"]["uid"], "runner")
            return None if report is None else str(report["status"])
        assert self.agent is not None
        runner = self.agent.find(namespace, pod)
        code = None if runner is None else runner.containers["runner"].exit_code
        return None if code is None else f"exit {code}"


async def add_node(cluster: ClusterHandle, name: str, labels: dict[str, str]) -> ExtraNode:
    local = _local(cluster)
    if cluster.real_node:
        real = await cluster.call(local.running.add_real_node(name, labels))
        return ExtraNode(name, real=real)
    agent = await cluster.call(_start_agent(local, name, labels))
    return ExtraNode(name, agent=agent)


async def remove_node(cluster: ClusterHandle, node: ExtraNode) -> None:
    local = _local(cluster)
    if node.real is not None:
        await cluster.call(local.running.remove_real_node(node.real))
    elif node.agent is not None:
        await cluster.call(_remove_agent(node.agent))


async def partition(cluster: ClusterHandle, node: ExtraNode) -> None:
    """The node goes silent; what runs on it keeps running."""
    if node.real is not None:
        node.real.partition()
    else:
        assert node.agent is not None
        await cluster.call(_partition_agent(node.agent))


async def _partition_agent(agent: NodeAgent) -> None:
    agent.partition()  # in the cluster's event loop, where the agent's tasks run


def _local(cluster: ClusterHandle) -> DevCluster:
    if cluster.local is None:
        pytest.skip("adding nodes needs the local devcluster (not E2E_CLUSTER=existing)")
    return cluster.local


async def _start_agent(local: DevCluster, name: str, labels: dict[str, str]) -> NodeAgent:
    client = KubeClient(load_kubeconfig(local.kubeconfig))
    agent = NodeAgent(
        client,
        local.running.control_plane.workdir,
        name,
        labels=labels,
        heartbeat_seconds=2.0,
        version=k8s_version(),
    )
    await agent.start()
    return agent


async def _remove_agent(agent: NodeAgent) -> None:
    await agent.stop()
    try:
        await agent.client.delete(f"/api/v1/nodes/{agent.name}")
    finally:
        await agent.client.aclose()
