"""What the approval tests on the API server share: the admission policies as shipped, reviewer
RBAC, users with groups, gated TeamRuns, and ApprovalDecisions built from real requests."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kubeconfig import load_kubeconfig
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma_operator.admission import DEPLOY_FILE
from oma_operator.approval_resources import decision_manifest
from oma_operator.models import ReviewerSet
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import wait_for
from tests.cluster.operator_kit import teamrun

DECISIONS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/approvaldecisions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
REVIEWER_VERBS = ["get", "list", "watch", "patch", "update"]


@pytest.fixture(scope="module")
def admission_policies(cluster: ClusterHandle, crds_installed: None) -> None:
    """deploy/admission-policies.yaml applied as shipped (replacing an older copy); left in
    place, as on a real cluster (each applies to every namespace)."""

    async def apply() -> None:
        async with KubeClient(load_kubeconfig(cluster.kubeconfig)) as kube:
            for doc in yaml.safe_load_all(DEPLOY_FILE.read_text()):
                kind = doc["kind"].lower()
                plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
                path = f"{ADMISSION}/{plural}"
                if await kube.exists(f"{path}/{doc['metadata']['name']}"):
                    await kube.delete(f"{path}/{doc['metadata']['name']}")
                await kube.create(path, doc)
        await asyncio.sleep(2)  # policies take effect once the API server has loaded them

    asyncio.run(apply())


async def grant(
    kube: KubeClient,
    namespace: str,
    role: str,
    rules: list[dict[str, Any]],
    users: tuple[str, ...] = (),
    groups: tuple[str, ...] = (),
) -> None:
    """A Role with ``rules`` bound to ``users`` and ``groups``."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    await kube.create(
        f"{rbac}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role},
            "rules": rules,
        },
    )
    subjects = [("User", u) for u in users] + [("Group", g) for g in groups]
    await kube.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
                for kind, name in subjects
            ],
        },
    )


async def grant_reviewers(
    kube: KubeClient, namespace: str, *users: str, groups: tuple[str, ...] = ()
) -> None:
    """RBAC as deploy/reviewer-role.yaml gives it: read TeamRuns, update ApprovalDecisions."""
    rules = [
        {"apiGroups": ["oma.dev"], "resources": ["approvaldecisions"], "verbs": REVIEWER_VERBS},
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["get", "list", "watch"]},
    ]
    await grant(kube, namespace, "reviewers", rules, users, groups)


async def pending_decision(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The ApprovalDecision the operator published (and verified) for TeamRun ``name``."""

    async def published() -> dict[str, Any] | None:
        body = await kube.get(
            DECISIONS.format(ns=namespace), labelSelector=f"oma.dev/teamrun={name}"
        )
        items = [d for d in body.get("items", []) if (d.get("status") or {}).get("verified")]
        return items[0] if items else None

    return await wait_for(published, 90, f"an ApprovalDecision for {name}")


def as_user(cluster: ClusterHandle, user: str, groups: tuple[str, ...] = ()) -> KubeClient:
    return KubeClient(load_kubeconfig(cluster.mint_kubeconfig(user, groups)))


def gated(
    name: str,
    effects: SideEffects,
    after: str,
    entry: str = "charge",
    approvals: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A TeamRun whose one ledger_append call (``entry``, amount 7) waits for a decision."""
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "g1", "name": "ledger_append", "input": {"entry": entry, "amount": 7}}
            ]
        },
        {"text": after},
    ]
    body = teamrun(name, script, effects)
    body["spec"]["approvals"] = {"tools": ["ledger_append"], **(approvals or {})}
    return body


def tool_request(run_id: str = "pay-1", **arguments: Any) -> ApprovalRequest:
    """A real tool-call request (what a suspended run asks about)."""
    arguments = {"entry": "charge", "amount": 7, **arguments}
    return create_approval_request(
        run_id=run_id,
        scope="tool_call",
        boundary="t-1:c1",
        content={
            "kind": "tool_call",
            "toolName": "ledger_append",
            "rawInput": arguments,
            "input": arguments,
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
        },
    )


async def published_decision(
    kube: KubeClient,
    namespace: str,
    request: ApprovalRequest,
    teamrun_name: str = "pay",
    reviewers: ReviewerSet | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """``request`` published as the operator publishes it (created by the test's admin, who
    holds every verb, then marked verified), for a TeamRun that need not exist; ``spec``
    entries replace the manifest's (None removes one)."""
    owner = {"metadata": {"name": teamrun_name, "namespace": namespace, "uid": str(uuid.uuid4())}}
    manifest = decision_manifest(owner, request, reviewers)
    manifest["spec"] = {
        key: value for key, value in (manifest["spec"] | spec).items() if value is not None
    }
    manifest["metadata"]["name"] = f"{teamrun_name}-{uuid.uuid4().hex[:16]}"
    del manifest["metadata"]["ownerReferences"]  # the garbage collector would remove it
    created = await kube.create(DECISIONS.format(ns=namespace), manifest)
    path = f"{DECISIONS.format(ns=namespace)}/{created['metadata']['name']}/status"
    return await kube.patch(path, {"status": {"verified": True, "decision": "Pending"}})


async def ledger_row(
    redis: Endpoint, teamrun_body: dict[str, Any], namespace: str, request_id: str
) -> Any:
    """The store's approval record of ``request_id`` for the TeamRun ``teamrun_body`` of
    Kubernetes namespace ``namespace``."""
    from oma.approval import get_approval_record

    store = teamrun_store(redis, teamrun_body, namespace)
    try:
        return await get_approval_record(store, request_id)
    finally:
        await store.aclose()


KUBECTL_PATCH = ["patch", "approvaldecision", "--type=merge", "-p"]


def kubectl_as(cluster: ClusterHandle, user: str, groups: tuple[str, ...] = ()) -> list[str]:
    """The real kubectl, as ``user``."""
    return [cluster.tool("kubectl"), "--kubeconfig", str(cluster.mint_kubeconfig(user, groups))]
