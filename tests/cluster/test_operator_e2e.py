"""The operator on a real API server: a TeamRun runs to completion, and survives an eviction.

The operator runs as its own process (``python -m oma_operator``) with the cluster's
kubeconfig; runner pods run ``oma-runner`` (on the node agent, as local processes); the store
is a real Redis. Nothing here depends on the node agent's internals.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma_operator.crdgen import approvaldecision_crd, teamrun_crd
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import get_or_none, wait_for
from tests.servers.redis_server import RedisServer

pytestmark = pytest.mark.cluster
TEAMRUNS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/teamruns"


@pytest.fixture(scope="module")
def crds_installed(cluster: ClusterHandle) -> None:
    import asyncio

    from devcluster.kubeconfig import load_kubeconfig

    async def apply() -> None:
        async with KubeClient(load_kubeconfig(cluster.kubeconfig)) as kube:
            for crd in (teamrun_crd(), approvaldecision_crd()):
                path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
                if await kube.exists(path):
                    await kube.delete(path)
                    await wait_for(lambda p=path: _absent(kube, p), 30, "old CRD deletion")
                await kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

                async def established(p: str = path) -> bool:
                    body = await kube.get(p)
                    conditions = (body.get("status") or {}).get("conditions") or []
                    return any(
                        c["type"] == "Established" and c["status"] == "True" for c in conditions
                    )

                await wait_for(established, 30, "CRD established")

    asyncio.run(apply())


async def _absent(kube: KubeClient, path: str) -> bool:
    return not await kube.exists(path)


@pytest.fixture
def operator(
    cluster: ClusterHandle, namespace: str, crds_installed: None, tmp_path: Path
) -> Iterator[Path]:
    log = tmp_path / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "OMA_RUNNER_IMAGE": "oma-runner:test",
    }
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "oma_operator", "--namespace", namespace],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
async def redis_secret(
    kube: KubeClient, namespace: str, redis_server: RedisServer
) -> AsyncIterator[str]:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "store"},
            "data": {"url": base64.b64encode(redis_server.url.encode()).decode()},
        },
    )
    yield "store"


def _teamrun(name: str, script: list[dict[str, Any]], ledger: Path) -> dict[str, Any]:
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
            "tasks": [{"title": "Record", "description": f"ledger {ledger}", "assignee": "clerk"}],
            "store": {
                "redis": {
                    "urlSecretRef": {"name": "store", "key": "url"},
                    "namespace": f"e2e-{uuid.uuid4().hex[:6]}",
                }
            },
            "retryPolicy": {"backoffSeconds": 1},
            "runner": {
                "terminationGracePeriodSeconds": 20,
                "env": [{"name": "OMA_LEDGER_PATH", "value": str(ledger)}],
            },
        },
    }


async def _status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    body = await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/{name}")
    return dict((body or {}).get("status") or {})


def _ledger(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["entry"] for line in path.read_text().splitlines()]


@pytest.mark.timeout(180)
async def test_teamrun_succeeds(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script = [
        {"tool_calls": [{"id": "x1", "name": "ledger_append", "input": {"entry": "paid"}}]},
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), _teamrun("pay", script, ledger))

    async def succeeded() -> dict[str, Any] | None:
        status = await _status(kube, namespace, "pay")
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = await wait_for(succeeded, 120, "the TeamRun to finish")
    assert status["phase"] == "Succeeded", (status, operator.read_text()[-3000:])
    assert status["attempt"] == 1 and status["taskSummary"] == "1/1"
    assert [a["outcome"] for a in status["attempts"]] == ["succeeded"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "True"
    assert _ledger(ledger) == ["paid"]
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/pay-a1")
    assert pod["spec"]["containers"][0]["command"] == ["oma-runner"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "oma.dev/outcome" not in (pod["metadata"].get("finalizers") or [])


@pytest.mark.timeout(240)
async def test_eviction_mid_task_resumes_in_attempt_2(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script = [
        {"tool_calls": [{"id": "e1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "e2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "both recorded"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), _teamrun("evict", script, ledger))

    async def first_recorded() -> bool:
        return _ledger(ledger) == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry of attempt 1")
    await kube.create(
        f"/api/v1/namespaces/{namespace}/pods/evict-a1/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "evict-a1", "namespace": namespace},
        },
    )

    async def finished() -> dict[str, Any] | None:
        status = await _status(kube, namespace, "evict")
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = await wait_for(finished, 180, "the evicted TeamRun to finish")
    assert status["phase"] == "Succeeded", (status, operator.read_text()[-3000:])
    assert status["attempt"] == 2
    first, second = status["attempts"]
    assert (first["attempt"], first["outcome"]) == (1, "disruption")
    assert first["reason"] == "EvictionByEvictionAPI" and first["exitCode"] == 11
    assert second["outcome"] == "succeeded"
    assert status["disruptions"] == 1
    assert _ledger(ledger) == ["first", "second"]  # nothing re-executed, nothing lost
