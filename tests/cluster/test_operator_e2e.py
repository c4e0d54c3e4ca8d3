"""The operator on a real API server: a TeamRun runs to completion, and survives an eviction.

The operator runs as its own process (``python -m oma_operator``) with the cluster's
kubeconfig; runner pods run ``oma-runner`` (on the node agent, as local processes); the store
is a real Redis. The side-effect ledger is a file path handed to the runner through
``spec.runner.env``, so these tests read it on the machine that runs the pods.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kubeconfig import load_kubeconfig
from oma_operator.crdgen import approvaldecision_crd, teamrun_crd
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import get_or_none, wait_for
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

pytestmark = pytest.mark.cluster
TEAMRUNS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/teamruns"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def replace_crd(kube: KubeClient, crd: dict[str, Any]) -> None:
    path = f"{CRDS}/{crd['metadata']['name']}"

    async def absent() -> bool:
        return not await kube.exists(path)

    async def established() -> bool:
        body = await kube.get(path)
        conditions = (body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    if await kube.exists(path):
        await kube.delete(path)
        await wait_for(absent, 30, "the old CRD to go")
    await kube.create(CRDS, crd)
    await wait_for(established, 30, "the CRD to be established")


@pytest.fixture(scope="module")
def crds_installed(cluster: ClusterHandle) -> None:
    async def apply() -> None:
        async with KubeClient(load_kubeconfig(cluster.kubeconfig)) as kube:
            for crd in (teamrun_crd(), approvaldecision_crd()):
                await replace_crd(kube, crd)

    asyncio.run(apply())


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
async def redis_secret(kube: KubeClient, namespace: str, redis_server: RedisServer) -> str:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "store"},
            "data": {"url": base64.b64encode(redis_server.url.encode()).decode()},
        },
    )
    return "store"


def teamrun(name: str, script: list[dict[str, Any]], ledger: Path) -> dict[str, Any]:
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
                "env": [{"name": "OMA_LEDGER_PATH", "value": str(ledger)}],
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


def start_process(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


async def operator_log(path: Path) -> str:
    return (await asyncio.to_thread(path.read_text))[-3000:]


async def ledger_entries(path: Path) -> list[str]:
    def read() -> list[str]:
        if not path.exists():
            return []
        return [json.loads(line)["entry"] for line in path.read_text().splitlines()]

    return await asyncio.to_thread(read)


@pytest.mark.timeout(180)
async def test_teamrun_succeeds(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "x1", "name": "ledger_append", "input": {"entry": "paid"}}]},
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("pay", script, ledger))
    status = await finished(kube, namespace, "pay", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 1 and status["taskSummary"] == "1/1"
    assert [a["outcome"] for a in status["attempts"]] == ["succeeded"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "True" and conditions["Progressing"] == "False"
    assert await ledger_entries(ledger) == ["paid"]
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/pay-a1")
    assert pod["spec"]["containers"][0]["command"] == ["oma-runner"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "oma.dev/outcome" not in (pod["metadata"].get("finalizers") or [])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_eviction_mid_task_resumes_in_attempt_2(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    tmp_path: Path,
    store: str,
    request: pytest.FixtureRequest,
    redis_secret: str,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "e1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "e2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "both recorded"},
    ]
    body = teamrun("evict", script, ledger)
    if store == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        dsn = base64.b64encode(postgres.dsn().encode()).decode()
        await kube.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "pg"},
                "data": {"dsn": dsn},
            },
        )
        body["spec"]["store"] = {
            "postgres": {
                "dsnSecretRef": {"name": "pg", "key": "dsn"},
                "schema": f"e2e_{uuid.uuid4().hex[:6]}",
            }
        }
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def first_recorded() -> bool:
        return await ledger_entries(ledger) == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry of attempt 1")
    await kube.create(
        f"/api/v1/namespaces/{namespace}/pods/evict-a1/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "evict-a1", "namespace": namespace},
        },
    )
    status = await finished(kube, namespace, "evict", 180)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 2
    first, second = status["attempts"]
    assert (first["attempt"], first["outcome"]) == (1, "disruption")
    assert first["reason"] == "EvictionByEvictionAPI" and first["exitCode"] == 11
    assert second["outcome"] == "succeeded" and status["disruptions"] == 1
    assert await ledger_entries(ledger) == ["first", "second"]  # nothing re-run, nothing lost


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"store": None}, "spec.store: Required value"),
        (
            {
                "store": {
                    "redis": {"urlSecretRef": {"name": "s", "key": "k"}},
                    "postgres": {"dsnSecretRef": {"name": "s", "key": "k"}},
                }
            },
            "store needs exactly one of redis or postgres",
        ),
        (
            {"team": {"agents": [{"name": "a", "model": {"provider": "gemini", "name": "x"}}]}},
            'Unsupported value: "gemini"',
        ),
        ({"mode": "team", "tasks": None}, "mode team needs a goal"),
        ({"retryPolicy": {"maxFailures": -1}}, "maxFailures"),
    ],
)
async def test_invalid_teamruns_are_refused_by_the_api_server(
    kube: KubeClient, namespace: str, crds_installed: None, change: dict[str, Any], message: str
) -> None:
    from devcluster.kube import ApiError

    body = teamrun("bad", [{"text": "x"}], Path("/nonexistent"))
    body["spec"] = {k: v for k, v in {**body["spec"], **change}.items() if v is not None}
    with pytest.raises(ApiError) as caught:
        await kube.create(TEAMRUNS.format(ns=namespace), body)
    assert caught.value.status == 422 and message in str(caught.value)


async def test_run_id_is_immutable(kube: KubeClient, namespace: str, crds_installed: None) -> None:
    from devcluster.kube import ApiError

    await kube.create(
        TEAMRUNS.format(ns=namespace), teamrun("fixed", [{"text": "x"}], Path("/nonexistent"))
    )
    with pytest.raises(ApiError) as caught:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/fixed", {"spec": {"runId": "other"}})
    assert caught.value.status == 422 and "runId is immutable" in str(caught.value)


@pytest.mark.timeout(120)
async def test_bad_task_dependencies_end_failed_with_a_message(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, tmp_path: Path
) -> None:
    body = teamrun("cyclic", [{"text": "x"}], tmp_path / "ledger.jsonl")
    body["spec"]["tasks"] = [
        {"title": "a", "description": "a", "dependsOn": ["b"]},
        {"title": "b", "description": "b", "dependsOn": ["a"]},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "cyclic", 90)
    assert status["phase"] == "Failed" and status["attempt"] == 1
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PermanentFailure"
    assert (
        "Invalid task dependencies" in failed["message"]
        and "cycle a -> b -> a" in (failed["message"])
    )


@pytest.mark.timeout(150)
async def test_a_crash_loop_exhausts_max_failures(
    kube: KubeClient, namespace: str, operator: Path, tmp_path: Path
) -> None:
    closed = "redis://127.0.0.1:9/0"  # nothing listens: every attempt fails transiently
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "store"},
            "data": {"url": base64.b64encode(closed.encode()).decode()},
        },
    )
    body = teamrun("loop", [{"text": "x"}], tmp_path / "ledger.jsonl")
    body["spec"]["retryPolicy"] = {"maxFailures": 2, "backoffSeconds": 1}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "loop", 120)
    assert status["phase"] == "Failed" and status["attempt"] == 3
    assert [a["outcome"] for a in status["attempts"]] == ["crash"] * 3
    assert all(a["exitCode"] == 1 for a in status["attempts"])
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailuresExhausted" and "unreachable" in failed["message"]


@pytest.mark.timeout(240)
async def test_kubelet_eviction_resumes_from_the_last_checkpoint(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    tmp_path: Path,
) -> None:
    agent = cluster.agent  # node-agent-only: kubelet-side eviction kills the process outright
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "k1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "k2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("kubelet", script, ledger))

    async def first_recorded() -> bool:
        return await ledger_entries(ledger) == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    await cluster.call(agent.evict_pod(namespace, "kubelet-a1"))
    status = await finished(kube, namespace, "kubelet", 180)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2
    assert (status["attempts"][0]["outcome"], status["attempts"][0]["reason"]) == (
        "disruption",
        "Evicted",
    )
    assert await ledger_entries(ledger) == ["first", "second"]


@pytest.mark.timeout(240)
async def test_operator_restart_mid_run_loses_no_outcome(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "o1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "o2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 3,
        },
        {"text": "done"},
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    argv = [sys.executable, "-m", "oma_operator", "--namespace", namespace]
    log = tmp_path / "operator.log"
    first = start_process(argv, env, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("restart", script, ledger))

        async def first_recorded() -> bool:
            return await ledger_entries(ledger) == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        first.kill()  # the operator dies; the eviction below happens while it is away
        first.wait()
        await kube.create(
            f"/api/v1/namespaces/{namespace}/pods/restart-a1/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "restart-a1", "namespace": namespace},
            },
        )

        async def a1_ended() -> bool:
            pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/restart-a1")
            return pod is not None and pod["status"].get("phase") == "Failed"

        await wait_for(a1_ended, 60, "attempt 1 to end while the operator is down")
        second = start_process(argv, env, log)
        status = await finished(kube, namespace, "restart", 180)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2
    assert [a["attempt"] for a in status["attempts"]] == [1, 2]  # recorded once each
    pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    names = {p["metadata"]["name"] for p in pods["items"]}
    assert "restart-a2" in names and "restart-a3" not in names  # no duplicate attempt
    assert await ledger_entries(ledger) == ["first", "second"]
