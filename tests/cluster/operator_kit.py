"""What the operator tests on the API server share: the CRDs installed as shipped, an operator
per test, the store Secret, TeamRuns of one scripted clerk, and waiting for their status.

The CRDs: on the local devcluster (the suite's own) each module replaces them with this
repository's; on an existing cluster they are installed only when absent and never deleted or
replaced when they were there, since deleting a CRD deletes every TeamRun or ApprovalDecision
on the cluster (``cluster_wide.py``; the ``cluster_wide`` fixture removes at the end what it
installed, when nothing else is left in it).

The fixtures are imported by name into the test modules that use them (with those they depend
on: ``crds_installed`` for ``operator``); ``cluster``, ``kube``, ``namespace``, ``e2e_redis`` and
``effects`` come from ``tests/cluster/conftest.py``.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma_operator.resources.crdgen import approvaldecision_crd, teamrun_crd
from tests.cluster.cluster_wide import CRDS, ClusterWide, ClusterWideMismatch
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import get_or_none, run_tool, wait_for
from tests.cluster.operators import operating

TEAMRUNS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/teamruns"
# What `kubectl get teamruns` shows (crds/teamruns.oma.dev.yaml), and with `-o wide`.
TEAMRUN_COLUMNS = ["NAME", "PHASE", "ATTEMPT", "TASKS", "APPROVALS", "SPEND", "CHECKPOINT", "AGE"]
TEAMRUN_WIDE = [  # -o wide
    *TEAMRUN_COLUMNS,
    *("RUN", "DISRUPTIONS", "FAILURES", "TURNS", "STARTED", "COMPLETED", "MESSAGE"),
]


async def replace_crd(
    kube: KubeClient, crd: dict[str, Any], shared: ClusterWide | None = None
) -> None:
    """Install ``crd`` and wait until it is served: replaced (deleted, with every object of its
    kind, and created again) on the suite's own cluster; with ``shared`` (an existing cluster)
    created only when absent, never deleted (``ClusterWide.ensure``)."""
    path = f"{CRDS}/{crd['metadata']['name']}"

    async def absent() -> bool:
        return not await kube.exists(path)

    async def established() -> bool:
        body = await kube.get(path)
        conditions = (body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    if shared is not None:
        await shared.ensure(kube, CRDS, crd)
    else:
        if await kube.delete_if_present(path):
            await wait_for(absent, 30, "the old CRD to go")
        await kube.create(CRDS, crd)
    await wait_for(established, 30, "the CRD to be established")
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    version = crd["spec"]["versions"][0]["name"]

    async def served() -> bool:
        try:
            await kube.get(f"/apis/{group}/{version}/{plural}")
        except ApiError as exc:
            if exc.status in (404, 429, 503):  # e.g. 429 "storage is (re)initializing"
                return False
            raise
        return True

    await wait_for(served, 30, f"{plural} to be served")


async def teamruns_admitted(kube: KubeClient) -> None:
    """Wait until a TeamRun passes admission (a server-side dry run): right after a CRD is
    created, admission policies that mutate it (the creator policy) answer 503 "Resource kind
    ... not found" until the API server publishes its schema to them."""

    async def admitted() -> bool:
        try:
            await kube.create(f"{TEAMRUNS.format(ns='default')}?dryRun=All", teamrun("probe", []))
        except ApiError as exc:
            if exc.status in (404, 429, 503):
                return False
            raise
        return True

    await wait_for(admitted, 60, "TeamRuns to pass admission")


async def create_admitted(kube: KubeClient, namespace: str, body: dict[str, Any]) -> None:
    """Create a TeamRun, retrying the transient 503 of admission policies that were created a
    moment ago (a dry run can pass before they load, then the first real create meets them)."""

    async def created() -> bool:
        try:
            await kube.create(TEAMRUNS.format(ns=namespace), body)
        except ApiError as exc:
            if exc.status == 503 and "not found" in str(exc):
                return False
            raise
        return True

    await wait_for(created, 60, "the TeamRun to pass admission")


@pytest.fixture(scope="module")
def crds_installed(cluster: ClusterHandle, cluster_wide: ClusterWide | None) -> None:
    async def apply() -> None:
        async with cluster.client() as kube:
            for crd in (teamrun_crd(), approvaldecision_crd()):
                await replace_crd(kube, crd, cluster_wide)
            await teamruns_admitted(kube)

    try:
        asyncio.run(apply())
    except ClusterWideMismatch as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
async def operator(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None, tmp_path: Path
) -> AsyncIterator[Path]:
    """This test's operator (the chart's Deployment on the real node); its log."""
    async with operating(cluster, kube, namespace, tmp_path / "operator.log") as running:
        yield running.log


async def store_secret(kube: KubeClient, namespace: str, url: str, name: str = "store") -> str:
    """The Secret ``name`` (key ``url``) holding ``url`` (TeamRuns of ``teamrun`` name
    ``store``)."""
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {"url": base64.b64encode(url.encode()).decode()},
        },
    )
    return name


@pytest.fixture
async def redis_secret(kube: KubeClient, namespace: str, e2e_redis: Endpoint) -> str:
    return await store_secret(kube, namespace, e2e_redis.for_pods)


def teamrun(
    name: str, script: list[dict[str, Any]], effects: SideEffects | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "oma.dev/v1alpha1",
        "kind": "TeamRun",
        "metadata": {"name": name},
        "spec": {
            "runId": f"{name}-{uuid.uuid4().hex[:6]}",
            "team": {
                "agents": [
                    {
                        "name": "clerk",
                        "tools": ["ledger_append", "wait"],
                        "model": {"provider": "scripted", "script": script},
                    }
                ]
            },
            "tasks": [{"title": "Record", "description": "Record.", "assignee": "clerk"}],
            "store": {
                "redis": {
                    "urlSecretRef": {"name": "store", "key": "url"},
                    "namespace": f"e2e-{uuid.uuid4().hex[:6]}",
                }
            },
            "retryPolicy": {"backoffSeconds": 1},
            "runner": {
                "terminationGracePeriodSeconds": 20,
                "env": effects.env() if effects is not None else [],
            },
        },
    }


async def status_of(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    body = await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/{name}")
    return dict((body or {}).get("status") or {})


async def finished(kube: KubeClient, namespace: str, name: str, limit: float) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, name)
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return await wait_for(done, limit, f"TeamRun {name} to finish")


async def operator_log(path: Path) -> str:
    return (await asyncio.to_thread(path.read_text))[-3000:]


async def kubectl(cluster: ClusterHandle, namespace: str, *args: str) -> str:
    return await run_tool(
        cluster.tool("kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, *args
    )
