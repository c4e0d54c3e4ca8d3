"""The operator's API client against a real API server, where a mistake would be silent: a
finalizer removal from a pod that changed since the operator saw it must remove exactly the
operator's finalizer, not another controller's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma_operator.k8s.client import Kube
from tests.cluster.conftest import ClusterHandle
from tests.cluster.operator_kit import crds_installed

pytestmark = pytest.mark.cluster
__all__ = ["crds_installed"]
OURS = "oma.dev/outcome"
THEIRS = "example.com/backup"


@pytest.fixture
async def operator_client(cluster: ClusterHandle) -> AsyncIterator[Kube]:
    client = await Kube.connect(kubeconfig=str(cluster.kubeconfig))
    try:
        yield client
    finally:
        await client.aclose()


async def parked_pod(kube: KubeClient, namespace: str, name: str, finalizers: list[str]) -> Any:
    """A pod bound to a node that does not exist: nothing runs it, its finalizers stay."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "none"}]},
    }
    return await kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


async def finalizers_of(kube: KubeClient, namespace: str, name: str) -> list[str]:
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return list(pod["metadata"].get("finalizers") or [])


async def release(kube: KubeClient, namespace: str, name: str) -> None:
    await kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}", {"metadata": {"finalizers": None}}
    )


@pytest.mark.timeout(60)
async def test_remove_finalizer_from_the_pod_as_seen_and_as_it_changed_since(
    kube: KubeClient, namespace: str, operator_client: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests: list[str] = []
    send = operator_client._call

    async def counted(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        requests.append(method)
        return await send(method, path, **kwargs)

    monkeypatch.setattr(operator_client, "_call", counted)
    # As seen: one request, a patch; the other controller's finalizer stays.
    seen = await parked_pod(kube, namespace, "current", [THEIRS, OURS])
    await operator_client.remove_finalizer(namespace, "current", OURS, seen)
    assert await finalizers_of(kube, namespace, "current") == [THEIRS]
    assert requests == ["PATCH"]

    # Changed since: another finalizer was put before ours, so ours moved. The patch's test op
    # fails on the position it saw, and the pod is read again: still only ours goes.
    stale = await parked_pod(kube, namespace, "moved", [OURS])
    await kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/moved", {"metadata": {"finalizers": [THEIRS, OURS]}}
    )
    requests.clear()
    await operator_client.remove_finalizer(namespace, "moved", OURS, stale)
    assert await finalizers_of(kube, namespace, "moved") == [THEIRS]
    assert requests == ["PATCH", "GET", "PATCH"]  # refused, read again, removed

    # Seen with ours, but someone removed it meanwhile and another took its place.
    gone = await parked_pod(kube, namespace, "replaced", [OURS])
    await kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/replaced", {"metadata": {"finalizers": [THEIRS]}}
    )
    await operator_client.remove_finalizer(namespace, "replaced", OURS, gone)
    assert await finalizers_of(kube, namespace, "replaced") == [THEIRS]

    # Without a seen pod (the old way, a GET first), and for a pod that is gone: nothing raised.
    await parked_pod(kube, namespace, "unseen", [OURS, THEIRS])
    await operator_client.remove_finalizer(namespace, "unseen", OURS)
    assert await finalizers_of(kube, namespace, "unseen") == [THEIRS]
    await operator_client.remove_finalizer(namespace, "absent", OURS, {"metadata": {}})
    await operator_client.remove_finalizer(
        namespace, "absent", OURS, {"metadata": {"finalizers": [OURS]}}
    )
    for name in ("current", "moved", "replaced", "unseen"):
        await release(kube, namespace, name)


@pytest.mark.timeout(60)
async def test_delete_decision_deletes_it_only_as_it_was_read(
    kube: KubeClient, namespace: str, operator_client: Kube, crds_installed: None
) -> None:
    """The operator deletes a Pending ApprovalDecision that is not its own (and publishes the
    request again). One changed (decided) between the operator's read and its delete must be
    judged as it is now, not deleted unseen: the delete names the resourceVersion it judged."""
    decisions = f"/apis/oma.dev/v1alpha1/namespaces/{namespace}/approvaldecisions"
    body = {
        "apiVersion": "oma.dev/v1alpha1",
        "kind": "ApprovalDecision",
        "metadata": {"name": "squat"},
        "spec": {
            "teamRun": "run",
            "requestId": "apr_" + "0" * 32,
            "requestHash": "a" * 64,
            "scope": "tool_call",
            "decision": "Pending",
        },
    }
    judged = await kube.create(decisions, body)
    meta = judged["metadata"]
    # Changed since it was read (here its labels; a decision would change it alike, but the
    # reviewer policy, when another suite installed it, admits decisions only from reviewers).
    decided = await kube.patch(f"{decisions}/squat", {"metadata": {"labels": {"seen": "later"}}})
    assert not await operator_client.delete_decision(
        namespace, "squat", meta["uid"], meta["resourceVersion"]
    )
    assert (await kube.get(f"{decisions}/squat"))["metadata"]["labels"] == {"seen": "later"}
    now = decided["metadata"]["resourceVersion"]
    assert await operator_client.delete_decision(namespace, "squat", meta["uid"], now)
    assert await operator_client.delete_decision(namespace, "squat", meta["uid"], now)  # gone
    with pytest.raises(ApiError) as gone:
        await kube.get(f"{decisions}/squat")
    assert gone.value.status == 404
