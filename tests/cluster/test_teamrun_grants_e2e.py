"""A TeamRun grants nothing its author does not have, replayed as a hostile tenant would on the
real API server with the shipped policies: Secrets its author cannot read, the runner pod
contract in runner.env, a run id equal to another namespace's run in a shared Redis, shared
memory of two runs in one store, and a password that a URL parser would not find."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma.store import RedisStore
from tests.cluster.approval_kit import (
    admission_policies,
    as_user,
    gated,
    grant,
    grant_reviewers,
    pending_decision,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import (
    create_namespace,
    delete_namespace,
    event_counts,
    get_or_none,
    oma,
)
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, operating

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
SECRETS = "/api/v1/namespaces/{ns}/secrets"


async def _secret(kube: KubeClient, namespace: str, name: str, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    await kube.create(SECRETS.format(ns=namespace), body)


async def _authors(kube: KubeClient, namespace: str, user: str, *readable: str) -> None:
    """``user`` may create TeamRuns and read only the Secrets named ``readable``."""
    rules: list[dict[str, Any]] = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["create", "patch", "get"]}
    ]
    if readable:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": list(readable),
                "verbs": ["get"],
            }
        )
    await grant(kube, namespace, f"authors-{user}", rules, (user,))


@pytest.mark.timeout(120)
async def test_a_teamrun_cannot_hand_its_pod_a_secret_its_author_cannot_read(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await _secret(kube, namespace, "db-admin", {"password": "root-of-everything"})
    await _authors(kube, namespace, "mallory", "store")
    body = teamrun("steal", [{"text": "x"}], effects)
    agent = body["spec"]["team"]["agents"][0]
    agent["model"] = {
        "provider": "anthropic",
        "name": "claude",
        "baseURL": "http://mallory.example:8080",
        "apiKeySecretRef": {"name": "db-admin", "key": "password"},
    }
    via_env = teamrun("steal-env", [{"text": "x"}], effects)
    via_env["spec"]["runner"]["env"].append(
        {"name": "LOOT", "valueFrom": {"secretKeyRef": {"name": "db-admin", "key": "password"}}}
    )
    via_store = teamrun("steal-store", [{"text": "x"}], effects)
    via_store["spec"]["store"]["redis"]["urlSecretRef"] = {"name": "db-admin", "key": "password"}
    async with as_user(cluster, "mallory") as mallory:
        for attempt in (body, via_env, via_store):
            with pytest.raises(ApiError) as refused:
                await mallory.create(TEAMRUNS.format(ns=namespace), attempt)
            assert refused.value.status == 403, refused.value
            assert "you cannot read (get) Secret db-admin" in str(refused.value)
        # What she may read, she may hand to a run; and once created, she cannot point it
        # elsewhere either.
        await mallory.create(TEAMRUNS.format(ns=namespace), teamrun("fine", [{"text": "ok"}]))
        path = f"{TEAMRUNS.format(ns=namespace)}/fine"
        with pytest.raises(ApiError) as repointed:
            await mallory.patch(
                path,
                {
                    "spec": {
                        "store": {
                            "redis": {"urlSecretRef": {"name": "db-admin", "key": "password"}}
                        }
                    }
                },
            )
        assert "you cannot read (get) Secret db-admin" in str(repointed.value)
    for name in ("steal", "steal-env", "steal-store"):
        assert await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{name}-a1") is None
    assert (await finished(kube, namespace, "fine", 90))["phase"] == "Succeeded"


@pytest.mark.timeout(60)
async def test_the_runner_pod_contract_cannot_be_set_in_runner_env(
    kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    for name in ("OMA_RUN_SPEC", "OMA_RUN_ID", "OMA_STORE_URL", "OMA_MODEL_KEY_CLERK"):
        body = teamrun(f"env-{uuid.uuid4().hex[:6]}", [{"text": "x"}])
        body["spec"]["runner"]["env"] = [{"name": name, "value": "{}"}]
        with pytest.raises(ApiError) as refused:
            await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert refused.value.status == 422, name
        assert "reserved for the runner pod contract" in str(refused.value), name


@pytest.mark.timeout(60)
async def test_what_the_crd_can_check_of_the_run_spec_is_refused_and_the_rest_is_invalid_spec(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    twice = teamrun("twice", [{"text": "x"}])
    twice["spec"]["team"]["agents"] *= 2
    goal = teamrun("goal", [{"text": "x"}])
    goal["spec"]["goal"] = "and also a goal"
    for body, why in ((twice, "agent names must be unique"), (goal, "work of its mode only")):
        with pytest.raises(ApiError) as refused:
            await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert refused.value.status == 422 and why in str(refused.value)
    # A rule CEL does not express: the operator ends it InvalidSpec, before any pod.
    nameless = teamrun("nameless", [{"text": "x"}])
    nameless["spec"]["team"]["agents"][0]["model"] = {"provider": "openai"}
    await kube.create(TEAMRUNS.format(ns=namespace), nameless)
    status = await finished(kube, namespace, "nameless", 30)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec" and "needs a 'name'" in failed["message"]
    assert await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/nameless-a1") is None
    assert "InvalidSpec" in await event_counts(kube, namespace, "nameless")


@pytest.fixture
async def other_namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = await create_namespace(kube)
    yield name
    await delete_namespace(kube, name)


@pytest.mark.timeout(300)
async def test_equal_run_ids_in_two_namespaces_sharing_a_redis_never_meet(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    other_namespace: str,
    crds_installed: None,
    admission_policies: None,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """Tenant B gives its TeamRun tenant A's run id and store namespace: B's run is its own
    (its ApprovalDecision shows B's input, not A's), and B's approval pays nothing of A's."""
    await _secret(kube, other_namespace, "store", {"url": e2e_redis.for_pods})
    await grant_reviewers(kube, namespace, "alice")
    await grant_reviewers(kube, other_namespace, "bert")
    shared = {"runId": f"shared-{uuid.uuid4().hex[:6]}", "namespace": f"e2e-{uuid.uuid4().hex[:6]}"}
    a = gated("pay", effects, "paid", "a-pays-supplier")
    b = gated("pay", effects, "paid", "b-pays-itself")
    for body in (a, b):
        body["spec"]["runId"] = shared["runId"]
        body["spec"]["store"]["redis"]["namespace"] = shared["namespace"]
    log = tmp_path / "operator.log"
    both = OperatorSettings(other_namespaces=(other_namespace,))
    async with operating(cluster, kube, namespace, log, both):
        await kube.create(TEAMRUNS.format(ns=namespace), a)
        decision_a = await pending_decision(kube, namespace, "pay")
        await kube.create(TEAMRUNS.format(ns=other_namespace), b)
        decision_b = await pending_decision(kube, other_namespace, "pay")
        assert "b-pays-itself" in decision_b["spec"]["content"]
        assert "a-pays-supplier" not in decision_b["spec"]["content"]
        assert decision_a["spec"]["requestId"] != decision_b["spec"]["requestId"] or (
            decision_a["spec"]["requestHash"] != decision_b["spec"]["requestHash"]
        )
        done = await oma(
            cluster.mint_kubeconfig("bert"),
            "approve",
            decision_b["metadata"]["name"],
            "-n",
            other_namespace,
        )
        assert done.returncode == 0, done.stderr
        assert (await finished(kube, other_namespace, "pay", 150))["phase"] == "Succeeded"
        assert await effects.ledger() == ["b-pays-itself"]
        status_a = await status_of(kube, namespace, "pay")
        assert status_a["phase"] == "AwaitingApproval" and status_a["attempt"] == 1
        done = await oma(
            cluster.mint_kubeconfig("alice"),
            "approve",
            decision_a["metadata"]["name"],
            "-n",
            namespace,
        )
        assert done.returncode == 0, done.stderr
        assert (await finished(kube, namespace, "pay", 150))["phase"] == "Succeeded"
    assert sorted(await effects.ledger()) == ["a-pays-supplier", "b-pays-itself"]
    store = RedisStore(e2e_redis.for_tests, namespace=shared["namespace"])
    try:
        keys = [entry.key for entry in await store.list()] + await store.journal_keys()
    finally:
        await store.aclose()
    for tenant in (namespace, other_namespace):
        latest = f"__oma_tenant__/{tenant}/__oma_checkpoint__/{shared['runId']}/latest"
        assert latest in keys, keys


@pytest.mark.timeout(300)
async def test_shared_memory_of_two_runs_in_one_store_is_each_runs_own(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    redis_namespace = f"e2e-{uuid.uuid4().hex[:6]}"
    bodies = {}
    for name, answer in (("first", "the first run's secret"), ("second", "the second answer")):
        body = teamrun(name, [{"text": answer}], effects)
        body["spec"]["sharedMemory"] = True
        body["spec"]["store"]["redis"]["namespace"] = redis_namespace
        bodies[name] = body
        await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert (await finished(kube, namespace, name, 120))["phase"] == "Succeeded"
    store = RedisStore(e2e_redis.for_tests, namespace=redis_namespace)
    try:
        entries = {e.key: e.value for e in await store.list()}
    finally:
        await store.aclose()
    memory = f"__oma_tenant__/{namespace}/__oma_memory__/run/"
    first = [
        v for k, v in entries.items() if k.startswith(memory + bodies["first"]["spec"]["runId"])
    ]
    second = [
        v for k, v in entries.items() if k.startswith(memory + bodies["second"]["spec"]["runId"])
    ]
    assert any("the first run's secret" in v for v in first)
    assert second and not any("the first run's secret" in v for v in second)


@pytest.mark.timeout(180)
async def test_a_password_no_url_parser_finds_never_shows_in_status_or_events(
    kube: KubeClient, namespace: str, operator: Path
) -> None:
    password = "pa/ss#wo?rd@x"  # unencoded: a URL parser sees no password in it at all
    await _secret(kube, namespace, "store", {"url": f"redis://:{password}@127.0.0.1:9/0"})
    body = teamrun("masked", [{"text": "x"}])
    body["spec"]["retryPolicy"] = {"backoffSeconds": 1, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "masked", 150)
    assert status["phase"] == "Failed"
    events = await kube.get(f"/api/v1/namespaces/{namespace}/events")
    shown = repr(status) + repr([e.get("message") for e in events["items"]])
    for part in (password, "pa/ss", "wo?rd"):
        assert part not in shown, shown
    assert "***" in repr(status["attempts"]), status["attempts"]
