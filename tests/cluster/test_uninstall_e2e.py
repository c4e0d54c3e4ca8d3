"""Nothing the operator leaves behind blocks deletion: an operator that stops (``helm
uninstall`` deletes its Deployment) lets go of its runner pods, so deleting their namespace
completes; one that starts again takes the live pods back (real API server and controllers)."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import get_or_none, wait_for
from tests.cluster.operator_process import OperatorProcess
from tests.cluster.test_operator_e2e import TEAMRUNS, crds_installed, teamrun

__all__ = ["crds_installed"]
pytestmark = pytest.mark.cluster
FINALIZER = "oma.dev/outcome"


async def _finalizers(kube: KubeClient, namespace: str, pod: str) -> list[str] | None:
    body = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{pod}")
    return None if body is None else list(body["metadata"].get("finalizers") or [])


@pytest.mark.timeout(180)
async def test_a_stopped_operator_leaves_no_finalizer_and_the_namespace_deletes(
    cluster: ClusterHandle,
    kube: KubeClient,
    crds_installed: None,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    # A namespace of this test's own: the test deletes it (the shared fixture would again).
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )

    async def sa_ready() -> bool:
        return await kube.exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")

    await wait_for(sa_ready, 30, "the namespace's default ServiceAccount")
    url = base64.b64encode(e2e_redis.for_pods.encode()).decode()
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "store"}, "data": {"url": url}},
    )
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w", "name": "wait", "input": {"seconds": 40}}]}
    ]
    operator = OperatorProcess(cluster.kubeconfig, namespace, tmp_path / "operator.log")
    with operator:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("long", script, effects))

        async def tracked() -> bool:
            return FINALIZER in (await _finalizers(kube, namespace, "long-a1") or [])

        await wait_for(tracked, 60, "the runner pod, tracked by its finalizer")
    # Stopped as a Deployment's pod is (SIGTERM): its cleanup lets go of the pod.
    assert await _finalizers(kube, namespace, "long-a1") == []
    with operator:  # a new operator takes the live pod back

        async def tracked_again() -> bool:
            return FINALIZER in (await _finalizers(kube, namespace, "long-a1") or [])

        await wait_for(tracked_again, 60, "the restarted operator to track the pod again")
    assert await _finalizers(kube, namespace, "long-a1") == []
    await kube.delete(f"/api/v1/namespaces/{namespace}")

    async def namespace_gone() -> bool:
        return await get_or_none(kube, f"/api/v1/namespaces/{namespace}") is None

    await wait_for(namespace_gone, 90, "the namespace to be deleted, runner pod and all")
