"""What the approval tests on the API server share: the admission policies as shipped, reviewer
RBAC, users with groups, gated TeamRuns, and ApprovalDecisions built from real requests."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import uuid
from collections.abc import Awaitable
from typing import Any, cast

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kube import JSON, ApiError
from devcluster.kubeconfig import load_kubeconfig
from oma.approval import decide_approval
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma_operator.approvals.rules.resources import decision_manifest
from oma_operator.resources.admission import DEPLOY_FILE
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import ReviewerSet
from tests.cluster.cluster_wide import ClusterWide, ClusterWideMismatch
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import create_namespace, delete_namespace, get_or_none, wait_for
from tests.cluster.operator_kit import TEAMRUNS, create_admitted, teamrun

DECISIONS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/approvaldecisions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
REVIEWER_VERBS = ["get", "list", "watch", "patch", "update"]
APPLIED = "oma.dev/test-applied"  # on each policy: the digest of the manifest it came from


@pytest.fixture(scope="module")
def admission_policies(
    cluster: ClusterHandle, crds_installed: None, cluster_wide: ClusterWide | None
) -> None:
    """deploy/admission-policies.yaml applied as shipped (replacing an older copy); left in
    place, as on a real cluster (each applies to every namespace). A copy applied from this
    very text is kept: replacing it would leave a moment without it after the probes of
    ``policies_loaded`` found it in force. On an existing cluster (``cluster_wide``) each is
    installed only when absent, removed at the end if so, and never replaced."""

    async def apply() -> None:
        async with cluster.client() as kube:
            for doc in yaml.safe_load_all(DEPLOY_FILE.read_text()):
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
                doc["metadata"].setdefault("annotations", {})[APPLIED] = digest
                kind = doc["kind"].lower()
                plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
                path = f"{ADMISSION}/{plural}"
                if cluster_wide is not None:
                    await cluster_wide.ensure(kube, path, doc)
                    continue
                found = await get_or_none(kube, f"{path}/{doc['metadata']['name']}")
                if found is not None:
                    if (found["metadata"].get("annotations") or {}).get(APPLIED) == digest:
                        continue
                    await kube.delete(f"{path}/{doc['metadata']['name']}")
                await kube.create(path, doc)
            await policies_loaded(cluster, kube)

    try:
        asyncio.run(apply())
    except ClusterWideMismatch as exc:
        pytest.fail(str(exc), pytrace=False)


PROBE_USER = "oma-policy-probe"  # may create and patch TeamRuns in namespace default, nothing else
CREATOR = "oma.dev/created-by"
EDITORS = "oma.dev/edited-by"
PROBES = TEAMRUNS.format(ns="default")
POLL = 3.0  # the operator's approval poll period (handlers.APPROVAL_POLL_SECONDS)


async def refused(request: Awaitable[Any], because: str) -> bool:
    """Whether ``request`` is refused ``because`` (a policy's message); False when it passes or
    meets what a moment ago's policy, schema or RBAC change still causes."""
    try:
        await request
    except ApiError as exc:
        if because in str(exc):
            return True
        if exc.status in (403, 404, 429, 503):
            return False
        raise
    return False


async def creator_recorded(kube: KubeClient) -> bool:
    """Whether a TeamRun created now (a dry run) gets its creator annotation."""
    try:
        made = await kube.create(f"{PROBES}?dryRun=All", teamrun("probe", []))
    except ApiError as exc:
        if exc.status in (404, 429, 503):  # the CRD's schema is not published to the policy yet
            return False
        raise
    return CREATOR in (made["metadata"].get("annotations") or {})


async def policies_loaded(cluster: ClusterHandle, kube: KubeClient) -> None:
    """Wait until the API server applies every policy of deploy/admission-policies.yaml (it
    loads them a moment after they are created): the creator is recorded, and for each
    validating policy a probe request it refuses is refused. The probes are dry runs but one:
    the creator policy's update rule needs a TeamRun that exists (in a namespace of its own,
    deleted after, with the probe user's Role)."""
    await wait_for(lambda: creator_recorded(kube), 60, "the creator policy to record creators")
    owner: TeamRunBody = {
        "metadata": {"name": "probe", "namespace": "default", "uid": str(uuid.uuid4())}
    }
    decided = decision_manifest(owner, tool_request(), None)
    decided["spec"] |= {"decision": "Approved", "reviewer": "admin"}
    decisions = f"{DECISIONS.format(ns='default')}?dryRun=All"
    await wait_for(
        # devcluster's client takes plain JSON (dict[str, Any]), which a TypedDict is not
        lambda: refused(
            kube.create(decisions, cast(JSON, decided)), "an ApprovalDecision is created Pending"
        ),
        60,
        "the ApprovalDecision policy to refuse a decided ApprovalDecision",
    )
    rules = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    name = f"policy-probe-{uuid.uuid4().hex[:8]}"
    probes = await create_namespace(kube)
    teamruns = TEAMRUNS.format(ns=probes)
    path = f"{teamruns}/{name}"
    try:
        await grant(kube, probes, name, rules, (PROBE_USER,))
        async with cluster.client(impersonate_user=PROBE_USER) as prober:
            await wait_for(
                lambda: refused(
                    prober.create(f"{teamruns}?dryRun=All", teamrun(name, [])),
                    "you cannot read (get) Secret store",
                ),
                60,
                "the reference policy to refuse a Secret its creator cannot read",
            )
            await wait_for(
                lambda: refused(
                    prober.create(f"/api/v1/namespaces/{probes}/pods?dryRun=All", forged_pod(name)),
                    "only the oma operator creates runner pods",
                ),
                60,
                "the runner-pods policy to refuse a pod labelled for a TeamRun",
            )
        await create_admitted(kube, probes, teamrun(name, []))
        forged = {"metadata": {"annotations": {CREATOR: "someone-else"}}}
        await wait_for(
            lambda: refused(kube.patch(f"{path}?dryRun=All", forged), "cannot be changed"),
            60,
            "the creator policy to refuse a changed creator",
        )
        edit = {"spec": {"maxConcurrency": 2}}

        async def editor_recorded() -> bool:
            edited = await kube.patch(f"{path}?dryRun=All", edit)
            return EDITORS in (edited["metadata"].get("annotations") or {})

        await wait_for(editor_recorded, 60, "the editors policy to record a spec's editor")
    finally:
        await delete_namespace(kube, probes)


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
    resource_name: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """``request`` published as the operator publishes it (created by the test's admin, who
    holds every verb, then marked verified), for a TeamRun that need not exist, under
    ``resource_name`` (default: a new one); ``spec`` entries replace the manifest's (None
    removes one)."""
    owner: TeamRunBody = {
        "metadata": {"name": teamrun_name, "namespace": namespace, "uid": str(uuid.uuid4())}
    }
    manifest = decision_manifest(owner, request, reviewers)
    manifest["spec"] = {
        key: value for key, value in (manifest["spec"] | spec).items() if value is not None
    }
    manifest["metadata"]["name"] = resource_name or f"{teamrun_name}-{uuid.uuid4().hex[:16]}"
    del manifest["metadata"]["ownerReferences"]  # the garbage collector would remove it
    # devcluster's client takes plain JSON (dict[str, Any]), which a TypedDict is not
    created = await kube.create(DECISIONS.format(ns=namespace), cast(JSON, manifest))
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


def approve_argv(cluster: ClusterHandle, user: str, namespace: str, name: str) -> list[str]:
    """``kubectl patch`` as ``user``, approving ApprovalDecision ``name`` in the user's name."""
    patch = json.dumps({"spec": {"decision": "Approved", "reviewer": user}})
    return [*kubectl_as(cluster, user), "-n", namespace, *KUBECTL_PATCH, patch, name]


def forged_pod(teamrun_name: str, labels: bool = True) -> dict[str, Any]:
    """A pod dressed as TeamRun ``teamrun_name``'s first attempt: what a user who may create
    pods would make to end that run as she likes."""
    meta: dict[str, Any] = {"name": f"{teamrun_name}-a1"}
    if labels:
        meta["labels"] = {"oma.dev/teamrun": teamrun_name, "oma.dev/attempt": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "runner", "image": "localhost/not-there:1", "command": ["true"]}
            ],
        },
    }


async def polled(kube: KubeClient, namespace: str, decision: dict[str, Any], rounds: int) -> None:
    """Return after the operator has looked at the request ``rounds`` times from now, each round
    started after the one before had ended. Each round removes a stray message put in the
    ApprovalDecision's status (the operator makes the status what the ledger says), and its
    approval poll visits a run once per round."""
    path = f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}"

    async def repaired(stray: str) -> bool:
        return ((await kube.get(path)).get("status") or {}).get("message") != stray

    for round_ in range(1, rounds + 1):
        stray = f"not the operator's: poll probe {round_}"
        put = await kube.patch(f"{path}/status", {"status": {"message": stray}})
        assert put["status"]["message"] == stray, put["status"]  # kept: the probe can work
        look = functools.partial(repaired, stray)
        await wait_for(look, 20 * POLL, f"approval poll {round_} of {rounds} to look")


async def approve_in_store(
    redis: Endpoint, body: dict[str, Any], namespace: str, decision: dict[str, Any]
) -> None:
    """Approve the request of ``decision`` in the TeamRun's store, as ``oma approvals approve``
    does: beside Kubernetes, for the operator to find."""
    store = teamrun_store(redis, body, namespace)
    try:
        await decide_approval(
            store,
            request_id=decision["spec"]["requestId"],
            request_hash=decision["spec"]["requestHash"],
            decision="approve",
            reviewer={"id": "ops-cli"},
        )
    finally:
        await store.aclose()
