"""Metrics during real runs: the operator's endpoint and a runner's, scraped while a TeamRun is
evicted by the kubelet (the runner is killed outright) and resumes, and while one waits for an
approval. Every series in docs/metrics.md is asserted here or in the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devcluster import KubeClient
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import get_or_none, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    redis_secret,
    teamrun,
)
from tests.cluster.operators import Operator, OperatorSettings, operating

__all__ = ["crds_installed", "redis_secret"]
pytestmark = pytest.mark.cluster
DECISIONS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/approvaldecisions"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def operator(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None, tmp_path: Path
) -> AsyncIterator[Operator]:
    """This test's operator with its /metrics and its runners' on (on the real node the
    chart's Deployment with metrics.enabled and metrics.runners.enabled)."""
    metered = OperatorSettings(metrics=True)
    async with operating(cluster, kube, namespace, tmp_path / "operator.log", metered) as running:
        yield running


Address = Callable[[], Awaitable[str | None]]  # host:port, None while there is none yet


def loopback(port: int) -> Address:
    async def address() -> str:
        return f"127.0.0.1:{port}"

    return address


def runner_of(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, pod: str, port: int
) -> Address:
    """A runner pod's metrics endpoint: on the node agent a loopback port, on a real node the
    pod's own address (the test runs in the sandbox's network, where pod IPs route)."""
    if not cluster.real_node:
        return loopback(port)

    async def address() -> str | None:
        body = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{pod}")
        ip = None if body is None else (body.get("status") or {}).get("podIP")
        return f"{ip}:{port}" if ip else None

    return address


async def scrape(address: Address) -> Samples | None:
    """Every sample of ``/metrics`` at ``address``; ``None`` while nothing listens there."""
    where = await address()
    if where is None:
        return None
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"http://{where}/metrics")
    except httpx.TransportError:
        return None
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (name, frozenset(labels.items()))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get(key(name, **labels))


async def scrape_until(address: Address, what: str, expected: Samples) -> Samples:
    """Scrape until every expected sample has its value (series move as events arrive)."""

    async def probe() -> Samples | None:
        samples = await scrape(address)
        if samples is None or any(samples.get(k) != v for k, v in expected.items()):
            return None
        return samples

    return await wait_for(probe, 90, what, interval=0.3)


@pytest.mark.timeout(300)
async def test_eviction_and_resume_are_counted_by_operator_and_runners(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Operator,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    # One turn, two calls: the ledger entry commits at once, the wait keeps the attempt busy
    # (on a real node long enough for the kubelet to see the pod's disk use, every ~10 s).
    wait = 40 if cluster.real_node else 6
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "m1", "name": "ledger_append", "input": {"entry": "first"}},
                {"id": "m2", "name": "wait", "input": {"seconds": wait}},
            ]
        },
        {"text": "done"},
    ]
    body = teamrun("metered", script, effects)
    if cluster.real_node:  # the kubelet evicts a pod over its local-storage limit
        body["spec"]["runner"]["resources"] = {"limits": {"ephemeral-storage": "10Mi"}}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    during = await scrape_until(
        operator.metrics_address,
        "the operator to count the run as Running",
        {key("oma_teamruns", phase="Running"): 1},
    )
    assert value(during, "oma_attempts_total", outcome="disruption") == 0

    port = operator.runner_metrics_port
    first = await scrape_until(
        runner_of(cluster, kube, namespace, "metered-a1", port),
        "attempt 1's runner to report the committed ledger call",
        {
            key("oma_runner_tool_calls_total", source="executed"): 1,
            key("oma_runner_tool_calls_total", source="replayed"): 0,
        },
    )
    assert (value(first, "oma_runner_checkpoint_save_seconds_count") or 0) >= 1
    assert value(first, "oma_runner_checkpoint_save_failures_total") == 0
    assert await effects.ledger() == ["first"]
    await cluster.kubelet_evict(kube, namespace, "metered-a1")  # killed: it reports nothing

    # Attempt 2 replays the committed call at once, then runs the wait again.
    await scrape_until(
        runner_of(cluster, kube, namespace, "metered-a2", port),
        "attempt 2's runner to replay the committed call",
        {
            key("oma_runner_tool_calls_total", source="replayed"): 1,
            key("oma_runner_tool_calls_total", source="executed"): 0,
        },
    )
    status = await finished(kube, namespace, "metered", 180)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, status
    assert await effects.ledger() == ["first"]  # replayed, not run again

    after = await scrape_until(
        operator.metrics_address,
        "the operator to count both attempts and the finished run",
        {
            key("oma_teamruns", phase="Succeeded"): 1,
            key("oma_teamruns", phase="Running"): 0,
            key("oma_attempts_total", outcome="disruption"): 1,
            key("oma_attempts_total", outcome="succeeded"): 1,
        },
    )
    assert value(after, "oma_attempts_total", outcome="crash") == 0
    assert value(after, "oma_resume_latency_seconds_count", after="disruption") == 1
    latency = value(after, "oma_resume_latency_seconds_sum", after="disruption")
    assert latency is not None and 0 <= latency < 60
    # Attempt 1 was killed (no report); attempt 2 reported its replay, its wait and its saves.
    assert value(after, "oma_reported_tool_calls_total", source="replayed") == 1
    assert value(after, "oma_reported_tool_calls_total", source="executed") == 1
    assert (value(after, "oma_reported_checkpoint_saves_total") or 0) >= 2
    assert (value(after, "oma_reported_checkpoint_save_seconds_total") or 0) > 0
    assert value(after, "oma_reported_checkpoint_save_failures_total") == 0
    assert value(after, "oma_approval_wait_seconds_count", decision="approved") == 0
    assert ("process_cpu_seconds_total", frozenset()) in after  # the client's process series


@pytest.mark.timeout(240)
async def test_approval_wait_and_the_resume_after_it_are_measured(
    kube: KubeClient, namespace: str, operator: Operator, redis_secret: str, effects: SideEffects
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "g1", "name": "ledger_append", "input": {"entry": "charge"}}]},
        {"text": "charged"},
    ]
    body = teamrun("gated", script, effects)
    body["spec"]["approvals"] = {"tools": ["ledger_append"]}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def pending() -> dict[str, Any] | None:
        found = await kube.get(
            DECISIONS.format(ns=namespace), labelSelector="oma.dev/teamrun=gated"
        )
        items: list[dict[str, Any]] = found.get("items", [])
        return items[0] if items else None

    decision = await wait_for(pending, 90, "the ApprovalDecision")
    await scrape_until(
        operator.metrics_address,
        "the run to be counted as awaiting approval",
        {
            key("oma_teamruns", phase="AwaitingApproval"): 1,
            key("oma_attempts_total", outcome="suspended"): 1,
        },
    )
    # Whoever we are: the reviewer policy, if installed, wants our own user name.
    review = await kube.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    me = review["status"]["userInfo"]["username"]
    await kube.patch(
        f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}",
        {"spec": {"decision": "Approved", "reviewer": me}},
    )
    status = await finished(kube, namespace, "gated", 150)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, status
    after = await scrape_until(
        operator.metrics_address,
        "the approval wait and the resume after it",
        {
            key("oma_approval_wait_seconds_count", decision="approved"): 1,
            key("oma_resume_latency_seconds_count", after="suspended"): 1,
            key("oma_attempts_total", outcome="succeeded"): 1,
            key("oma_teamruns", phase="Succeeded"): 1,
        },
    )
    wait = value(after, "oma_approval_wait_seconds_sum", decision="approved")
    assert wait is not None and 0 <= wait < 150
    assert value(after, "oma_approval_wait_seconds_count", decision="rejected") == 0
    assert await effects.ledger() == ["charge"]
