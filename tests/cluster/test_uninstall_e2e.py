"""Nothing the operator leaves behind blocks deletion: an operator that stops (``helm
uninstall`` scales it to 0 first, then deletes its Deployment) lets go of its runner pods, so
deleting their namespace completes; one that starts again takes the live pods back (real API
server and controllers)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma_operator.install.uninstall import stop_operator
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import IMAGE, get_or_none, wait_for
from tests.cluster.operator_kit import TEAMRUNS, crds_installed, redis_secret, teamrun
from tests.cluster.operators import OperatorSettings, helm, operator_for

__all__ = ["crds_installed", "redis_secret"]
pytestmark = pytest.mark.cluster
FINALIZER = "oma.dev/outcome"


async def _finalizers(kube: KubeClient, namespace: str, pod: str) -> list[str] | None:
    body = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{pod}")
    return None if body is None else list(body["metadata"].get("finalizers") or [])


@pytest.mark.timeout(180)
async def test_helm_uninstall_then_namespace_delete_completes_with_a_runner_pod_running(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w", "name": "wait", "input": {"seconds": 40}}]}
    ]
    # The chart's operator: on the real node its Deployment, elsewhere this test's process as
    # the chart's account; stopped (SIGTERM) as `helm uninstall` stops the Deployment's pod.
    operator = operator_for(
        cluster, kube, namespace, tmp_path / "operator.log", OperatorSettings(as_chart=True)
    )

    async def tracked() -> bool:
        return FINALIZER in (await _finalizers(kube, namespace, "long-a1") or [])

    async with operator:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("long", script, effects))
        await wait_for(tracked, 60, "the runner pod, tracked by its finalizer")
    # Its cleanup, with the chart's RBAC, let go of the pod.
    assert await _finalizers(kube, namespace, "long-a1") == []
    async with operator:  # a new operator takes the live pod back
        await wait_for(tracked, 60, "the restarted operator to track the pod again")
    assert await _finalizers(kube, namespace, "long-a1") == []
    assert operator.release is not None
    await asyncio.to_thread(helm, cluster, "uninstall", operator.release, "-n", namespace)
    await kube.delete(f"/api/v1/namespaces/{namespace}")

    async def namespace_gone() -> bool:
        return await get_or_none(kube, f"/api/v1/namespaces/{namespace}") is None

    await wait_for(namespace_gone, 90, "the namespace to be deleted, runner pod and all")


def _deployment(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": selector,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "300"]}],
                },
            },
        },
    }


@pytest.mark.timeout(120)
async def test_the_uninstall_hook_scales_the_operator_to_zero_and_waits_for_its_pod(
    kube: KubeClient, namespace: str, cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`oma-operator --stop-deployment` (the chart's pre-delete hook) against a real API server
    and controllers: the Deployment goes to 0 replicas and the call returns once its pod is
    gone. One whose selector has no matchLabels (it would match every pod) is left alone."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(deployments, _deployment("op", {"matchLabels": {"app": "op"}}))
    odd = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["odd"]}]}
    await kube.create(deployments, _deployment("odd", odd))

    async def running(app: str) -> bool:
        listed = await kube.get(pods, labelSelector=f"app={app}")
        return any((p.get("status") or {}).get("phase") == "Running" for p in listed["items"])

    await wait_for(lambda: running("op"), 60, "the Deployment's pod to run")
    assert await stop_operator(namespace, "op", 60) == 0
    assert (await kube.get(f"{deployments}/op"))["spec"]["replicas"] == 0
    assert (await kube.get(pods, labelSelector="app=op"))["items"] == []
    assert await stop_operator(namespace, "odd", 60) == 2
    assert (await kube.get(f"{deployments}/odd"))["spec"]["replicas"] == 1
