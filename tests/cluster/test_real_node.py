"""The local cluster's real node: a kubelet with containerd, the oma image as pods, and the
faults only a kubelet delivers (API eviction with SIGTERM, kubelet eviction, OOM kill, a node
that stops reporting). Runs inside ``python -m devcluster sandbox`` (hack/test does); skipped on
the node agent and on an existing cluster."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.binaries import k8s_version
from devcluster.kube import JSON
from oma_operator.runs.rules.pods import FINALIZER
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import REAL_NODE, REAL_NODE_IMAGE, Endpoint, SideEffects
from tests.cluster.helpers import (
    create_namespace,
    delete_namespace,
    evict,
    get_or_none,
    pod,
    run_tool,
    wait_for,
    wait_phase,
)
from tests.cluster.operator_kit import create_admitted, finished, teamrun, teamruns_admitted
from tests.cluster.operators import CHART, helm

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not REAL_NODE, reason="needs the real node (python -m devcluster sandbox)"),
]
RESTRICTED: JSON = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _container(obj: JSON) -> JSON:
    status: JSON = obj["status"]["containerStatuses"][0]
    return status


async def _pod(kube: KubeClient, namespace: str, manifest: JSON) -> str:
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    return f"/api/v1/namespaces/{namespace}/pods/{manifest['metadata']['name']}"


async def test_the_node_is_a_kubelet_with_containerd(kube: KubeClient) -> None:
    (node,) = (await kube.get("/api/v1/nodes"))["items"]
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == k8s_version()
    assert info["containerRuntimeVersion"].startswith("containerd://")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"


async def test_the_built_image_runs_as_a_restricted_pod(kube: KubeClient, namespace: str) -> None:
    manifest = pod(
        "image",
        "oma-runner --help > /dev/null && id -u > /dev/termination-log",
        automountServiceAccountToken=False,
        container={"image": REAL_NODE_IMAGE, "securityContext": RESTRICTED},
    )
    path = await _pod(kube, namespace, manifest)
    obj = await wait_phase(kube, path, {"Succeeded", "Failed"}, 90)
    status = _container(obj)
    assert status["state"]["terminated"]["exitCode"] == 0, status
    assert status["state"]["terminated"]["message"].strip() == "65532"
    podman = ["podman", "--storage-driver", "vfs", "image", "inspect", "--format", "{{.Id}}"]
    built = await run_tool(*podman, REAL_NODE_IMAGE)
    assert status["imageID"] == f"sha256:{built.strip()}"


async def test_an_api_eviction_sends_sigterm_and_keeps_the_message(
    kube: KubeClient, namespace: str
) -> None:
    script = "trap 'echo got TERM > /dev/termination-log; exit 0' TERM; while :; do sleep 1; done"
    path = await _pod(kube, namespace, pod("evicted", script))
    await wait_phase(kube, path, {"Running"})
    await evict(kube, namespace, "evicted")
    obj = await wait_phase(kube, path, {"Succeeded", "Failed"})
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    assert _container(obj)["state"]["terminated"]["message"].strip() == "got TERM"


async def test_the_kubelet_evicts_a_pod_over_its_ephemeral_storage_limit(
    kube: KubeClient, namespace: str
) -> None:
    script = "dd if=/dev/zero of=/tmp/fill bs=1M count=40; sleep 120"
    limits = {"resources": {"limits": {"ephemeral-storage": "10Mi"}}}
    path = await _pod(kube, namespace, pod("full", script, container=limits))
    obj = await wait_phase(kube, path, {"Failed"}, 90)
    assert obj["status"].get("reason") == "Evicted", obj["status"]
    assert "ephemeral local storage" in obj["status"]["message"]
    # What a kubelet eviction for local storage does not give (docs/local-cluster.md).
    assert "DisruptionTarget" not in {c["type"] for c in obj["status"]["conditions"]}


async def test_a_memory_limit_ends_in_an_oom_kill(kube: KubeClient, namespace: str) -> None:
    limits = {"resources": {"limits": {"memory": "32Mi"}}}
    manifest = pod("oom", "exec dd if=/dev/zero of=/dev/null bs=96M count=1", container=limits)
    path = await _pod(kube, namespace, manifest)
    obj = await wait_phase(kube, path, {"Failed"}, 60)
    terminated = _container(obj)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled"), terminated


async def test_a_stopped_kubelet_is_a_lost_node_and_comes_back(
    cluster: ClusterHandle, kube: KubeClient
) -> None:
    assert cluster.local is not None
    node = await cluster.call(cluster.local.running.add_real_node("flaky", {"oma.dev/pool": "x"}))

    async def ready_is(value: str) -> bool:
        body = await kube.get(f"/api/v1/nodes/{node.name}")
        conditions = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        return conditions.get("Ready") == value

    try:
        node.partition()
        await wait_for(lambda: ready_is("Unknown"), 60, "the node controller to mark it Unknown")
        node.heal()
        await wait_for(lambda: ready_is("True"), 60, "the healed node to be Ready again")
    finally:
        await cluster.call(cluster.local.running.remove_real_node(node))


@pytest.mark.timeout(420)
async def test_the_chart_runs_the_operator_in_cluster_through_an_eviction_and_its_own_loss(
    cluster: ClusterHandle, kube: KubeClient, e2e_redis: Endpoint, effects: SideEffects
) -> None:
    """The chart as shipped (operator Deployment from the built image, its service account and
    RBAC, runner pods under the restricted Pod Security Standard): an evicted runner resumes,
    and so does the run when the operator's own pod is deleted mid-run."""
    namespace, release = await _install_in_cluster(cluster, kube)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        await _store_secret(kube, namespace, e2e_redis)

        async def operator_pod() -> JSON | None:
            return await _operator_pod(kube, namespace)

        first_operator = await wait_for(operator_pod, 120, "the operator pod to be Ready")
        script: list[dict[str, Any]] = [
            {"tool_calls": [{"id": "c1", "name": "ledger_append", "input": {"entry": "a"}}]},
            {
                "tool_calls": [{"id": "c2", "name": "ledger_append", "input": {"entry": "b"}}],
                "delay": 6,
            },
            {"tool_calls": [{"id": "c3", "name": "ledger_append", "input": {"entry": "c"}}]},
            {"text": "done"},
        ]
        await create_admitted(kube, namespace, teamrun("chart", script, effects))

        async def entries(count: int) -> bool:
            return len(await effects.ledger()) >= count

        await wait_for(lambda: entries(1), 120, "attempt 1's first entry")
        await evict(kube, namespace, "chart-a1")
        await kube.delete(f"{pods}/{first_operator['metadata']['name']}")  # the operator too
        status = await finished(kube, namespace, "chart", 240)
        assert status["phase"] == "Succeeded" and status["attempt"] == 2, status
        assert await effects.ledger() == ["a", "b", "c"]
        runner = await kube.get(f"{pods}/chart-a2")
        assert runner["spec"]["containers"][0]["image"] == REAL_NODE_IMAGE
        assert runner["spec"]["automountServiceAccountToken"] is False
        second_operator = await wait_for(operator_pod, 60, "the new operator pod")
        assert second_operator["metadata"]["name"] != first_operator["metadata"]["name"]
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{await _what_ran(cluster, namespace)}") from failed
    finally:
        await asyncio.to_thread(helm, cluster, "uninstall", release, "-n", namespace, check=False)
        await delete_namespace(kube, namespace)


@pytest.mark.timeout(300)
async def test_helm_uninstall_of_the_in_cluster_operator_lets_the_namespace_go(
    cluster: ClusterHandle, kube: KubeClient, e2e_redis: Endpoint, effects: SideEffects
) -> None:
    """A runner pod runs, held by the operator's tracking finalizer; `helm uninstall` first
    runs the chart's pre-delete hook, which stops the operator while its RBAC still exists (its
    cleanup lets go of the runner pod), and deleting the namespace then completes. Without the
    hook the stopping operator met 403s and the namespace stayed Terminating."""
    namespace, release = await _install_in_cluster(cluster, kube)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        await _store_secret(kube, namespace, e2e_redis)
        await wait_for(lambda: _operator_pod(kube, namespace), 120, "the operator pod")
        script = [{"tool_calls": [{"id": "w", "name": "wait", "input": {"seconds": 50}}]}]
        await create_admitted(kube, namespace, teamrun("long", script, effects))

        async def tracked() -> bool:
            body = await get_or_none(kube, f"{pods}/long-a1")
            running = body is not None and (body.get("status") or {}).get("phase") == "Running"
            return running and FINALIZER in (body or {})["metadata"].get("finalizers", [])

        await wait_for(tracked, 120, "the runner pod, running and tracked by its finalizer")
        await asyncio.to_thread(helm, cluster, "uninstall", release, "-n", namespace)
        await kube.delete(f"/api/v1/namespaces/{namespace}")

        async def namespace_gone() -> bool:
            return await get_or_none(kube, f"/api/v1/namespaces/{namespace}") is None

        await wait_for(namespace_gone, 120, "the namespace to be deleted, runner pod and all")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{await _what_ran(cluster, namespace)}") from failed
    finally:
        await asyncio.to_thread(helm, cluster, "uninstall", release, "-n", namespace, check=False)
        await delete_namespace(kube, namespace)


async def _install_in_cluster(cluster: ClusterHandle, kube: KubeClient) -> tuple[str, str]:
    """The chart as shipped into a fresh namespace under the restricted Pod Security Standard,
    the operator Deployment from the built image; the namespace and the release."""
    namespace = await create_namespace(kube)
    await kube.patch(
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    release = f"r{uuid.uuid4().hex[:6]}"
    repository, tag = REAL_NODE_IMAGE.rsplit(":", 1)
    values = [f"image.repository={repository}", f"image.tag={tag}"]
    values += ["approvals.reviewerPolicy=false"]
    await asyncio.to_thread(
        helm, cluster, "install", release, str(CHART), "-n", namespace, "--wait=false",
        *[arg for value in values for arg in ("--set", value)],
    )  # fmt: skip
    await teamruns_admitted(kube)
    return namespace, release


async def _store_secret(kube: KubeClient, namespace: str, redis: Endpoint) -> None:
    secret = {"url": base64.b64encode(redis.for_pods.encode()).decode()}
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "store"}, "data": secret},
    )


async def _operator_pod(kube: KubeClient, namespace: str) -> JSON | None:
    listed = await kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=OPERATOR_PODS)
    running = [p for p in listed["items"] if _ready(p)]
    return running[0] if running else None


OPERATOR_PODS = "app.kubernetes.io/component=operator"


def _ready(pod: JSON) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
    return conditions.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


async def _what_ran(cluster: ClusterHandle, namespace: str) -> str:
    """Pods and the operator's log, for a failure message."""
    kubectl = [cluster.tool("kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace]
    parts = []
    for args in (
        ["get", "pods,teamruns", "-o", "wide"],
        ["logs", "-l", OPERATOR_PODS, "--tail=60"],
    ):
        try:
            parts.append(await run_tool(*kubectl, *args))
        except AssertionError as exc:
            parts.append(str(exc))
    return "\n".join(parts)
