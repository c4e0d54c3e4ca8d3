"""Approvals on Kubernetes: a suspended run, ApprovalDecision resources, kubectl-style patches
by real users (RBAC, the reviewer policy, one-way decisions), and the resumed run."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kube import ApiError
from devcluster.kubeconfig import load_kubeconfig
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import wait_for
from tests.cluster.operator_process import OperatorProcess
from tests.cluster.test_operator_e2e import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
DECISIONS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/approvaldecisions"
POLICY = Path(__file__).resolve().parents[2] / "deploy" / "approval-reviewer-policy.yaml"


@pytest.fixture(scope="module")
def reviewer_policy(cluster: ClusterHandle, crds_installed: None) -> None:
    async def apply() -> None:
        async with KubeClient(load_kubeconfig(cluster.kubeconfig)) as kube:
            for doc in yaml.safe_load_all(POLICY.read_text()):
                kind = (
                    "validatingadmissionpolicies"
                    if doc["kind"].endswith("Policy")
                    else ("validatingadmissionpolicybindings")
                )
                path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
                if await kube.exists(f"{path}/{doc['metadata']['name']}"):
                    await kube.delete(f"{path}/{doc['metadata']['name']}")
                await kube.create(path, doc)

    asyncio.run(apply())


async def _grant_reviewers(kube: KubeClient, namespace: str, *users: str) -> None:
    await kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "reviewers"},
            "rules": [
                {
                    "apiGroups": ["oma.dev"],
                    "resources": ["approvaldecisions"],
                    "verbs": ["get", "list", "watch", "patch", "update"],
                }
            ],
        },
    )
    await kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reviewers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "reviewers",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                for user in users
            ],
        },
    )


async def _pending_decision(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    async def created() -> dict[str, Any] | None:
        body = await kube.get(
            DECISIONS.format(ns=namespace), labelSelector=f"oma.dev/teamrun={name}"
        )
        items: list[dict[str, Any]] = body.get("items", [])
        return items[0] if items else None

    return await wait_for(created, 90, f"an ApprovalDecision for {name}")


async def _as(cluster: ClusterHandle, user: str) -> KubeClient:
    return KubeClient(load_kubeconfig(cluster.mint_kubeconfig(user)))


def _gated(name: str, effects: SideEffects, after: str) -> dict[str, Any]:
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "g1", "name": "ledger_append", "input": {"entry": "charge", "amount": 7}}
            ]
        },
        {"text": after},
    ]
    body = teamrun(name, script, effects)
    body["spec"]["approvals"] = {"tools": ["ledger_append"]}
    return body


@pytest.mark.timeout(240)
async def test_approve_by_patch_runs_the_tool_once(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    reviewer_policy: None,
    effects: SideEffects,
) -> None:
    await _grant_reviewers(kube, namespace, "alice", "bob")
    await kube.create(TEAMRUNS.format(ns=namespace), _gated("gate", effects, "charged"))
    decision = await _pending_decision(kube, namespace, "gate")
    status = await status_of(kube, namespace, "gate")
    assert status["phase"] == "AwaitingApproval" and status["pendingApprovals"] == 1
    spec = decision["spec"]
    assert spec["decision"] == "Pending" and spec["scope"] == "tool_call"
    assert "Tool call ledger_append" in spec["summary"] and '"amount": 7' in spec["summary"]
    assert spec["requestHash"] in spec["summary"]
    assert await effects.ledger() == []
    path = f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}"
    approve = {"spec": {"decision": "Approved", "reviewer": "alice"}}
    async with await _as(cluster, "mallory") as mallory:
        with pytest.raises(ApiError) as no_rbac:
            await mallory.patch(path, approve)
        assert no_rbac.value.status == 403
    async with await _as(cluster, "bob") as bob:
        with pytest.raises(ApiError) as not_yours:
            await bob.patch(path, approve)
        assert not_yours.value.status in (403, 422)
        assert "must be your own user name" in str(not_yours.value)
    async with await _as(cluster, "alice") as alice:
        await alice.patch(path, approve)
        with pytest.raises(ApiError) as second:
            await alice.patch(path, {"spec": {"decision": "Rejected", "reviewer": "alice"}})
        assert second.value.status == 422 and "a decision is final" in str(second.value)
        for rewrite in ({"reviewer": "mallory"}, {"reason": "added afterwards"}):
            with pytest.raises(ApiError) as audit:
                await alice.patch(path, {"spec": rewrite})
            assert audit.value.status == 422 and "final once the decision" in str(audit.value)
    final = await finished(kube, namespace, "gate", 150)
    assert final["phase"] == "Succeeded" and final["attempt"] == 2
    assert [a["outcome"] for a in final["attempts"]] == ["suspended", "succeeded"]
    assert await effects.ledger() == ["charge"]
    recorded = await kube.get(path)
    assert recorded["status"]["recorded"] is True
    assert (recorded["status"]["decision"], recorded["status"]["reviewer"]) == ("approved", "alice")


@pytest.mark.timeout(240)
async def test_reject_becomes_a_denied_result_and_the_run_continues(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    reviewer_policy: None,
    effects: SideEffects,
) -> None:
    await _grant_reviewers(kube, namespace, "carol")
    await kube.create(TEAMRUNS.format(ns=namespace), _gated("deny", effects, "charge cancelled"))
    decision = await _pending_decision(kube, namespace, "deny")
    async with await _as(cluster, "carol") as carol:
        await carol.patch(
            f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}",
            {"spec": {"decision": "Rejected", "reviewer": "carol"}},
        )
    final = await finished(kube, namespace, "deny", 150)
    assert final["phase"] == "Succeeded" and await effects.ledger() == []


@pytest.mark.timeout(240)
async def test_a_rejected_dispatch_ends_the_run_rejected(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    reviewer_policy: None,
) -> None:
    await _grant_reviewers(kube, namespace, "dave")
    body = teamrun("ship", [{"text": "deployed"}])
    body["spec"]["approvals"] = {"dispatch": ["Record"]}
    body["spec"]["runId"] = f"ship-{uuid.uuid4().hex[:6]}"
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await _pending_decision(kube, namespace, "ship")
    assert decision["spec"]["scope"] == "task_dispatch"
    async with await _as(cluster, "dave") as dave:
        await dave.patch(
            f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}",
            {"spec": {"decision": "Rejected", "reviewer": "dave"}},
        )

    async def rejected() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "ship")
        return status if status.get("phase") in ("Rejected", "Failed", "Succeeded") else None

    final = await wait_for(rejected, 150, "the run to end")
    assert final["phase"] == "Rejected" and final["attempt"] == 2


@pytest.mark.timeout(240)
async def test_a_decision_made_with_the_cli_is_reflected_and_resumes(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    body = _gated("cli", effects, "charged")
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await _pending_decision(kube, namespace, "cli")
    spec = decision["spec"]
    store_url = e2e_redis.for_tests  # the TeamRun's Redis namespace is part of its spec
    namespace_arg = body["spec"]["store"]["redis"]["namespace"]
    await asyncio.to_thread(_cli_approve, store_url, namespace_arg, spec)
    final = await finished(kube, namespace, "cli", 150)
    assert final["phase"] == "Succeeded" and await effects.ledger() == ["charge"]
    mirrored = await kube.get(f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}")
    assert mirrored["spec"]["decision"] == "Pending"  # the resource's spec is the user's
    assert (mirrored["status"]["decision"], mirrored["status"]["reviewer"]) == (
        "approved",
        "ops-cli",
    )


def _cli_approve(store_url: str, redis_namespace: str, spec: dict[str, Any]) -> None:
    from oma.approval import decide_approval
    from oma.store import RedisStore

    async def decide() -> None:
        store = RedisStore(store_url, namespace=redis_namespace)
        await decide_approval(
            store,
            request_id=spec["requestId"],
            request_hash=spec["requestHash"],
            decision="approve",
            reviewer={"id": "ops-cli"},
        )
        await store.aclose()

    asyncio.run(decide())


@pytest.mark.timeout(240)
async def test_operator_restart_between_decision_and_resume_resumes_once(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    reviewer_policy: None,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    await _grant_reviewers(kube, namespace, "erin")
    with OperatorProcess(cluster.kubeconfig, namespace, tmp_path / "operator.log") as operator:
        await kube.create(TEAMRUNS.format(ns=namespace), _gated("again", effects, "charged"))
        decision = await _pending_decision(kube, namespace, "again")
        operator.kill()
        async with await _as(cluster, "erin") as erin:
            await erin.patch(
                f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}",
                {"spec": {"decision": "Approved", "reviewer": "erin"}},
            )
        operator.start()
        final = await finished(kube, namespace, "again", 150)
    assert final["phase"] == "Succeeded" and final["attempt"] == 2
    assert [a["attempt"] for a in final["attempts"]] == [1, 2]
    assert await effects.ledger() == ["charge"]
