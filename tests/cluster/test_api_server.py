"""The API server itself: CRD schemas with CEL, RBAC, admission policies."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from devcluster import ApiError, KubeClient
from devcluster.kube import JSON
from devcluster.kubeconfig import load_kubeconfig
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import wait_for

pytestmark = pytest.mark.cluster
GROUP = "test.oma.dev"


def widget_crd(plural: str) -> JSON:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": plural.capitalize()[:-1]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["replicas", "minReplicas"],
                                    "properties": {
                                        "replicas": {"type": "integer", "minimum": 0},
                                        "minReplicas": {"type": "integer", "minimum": 0},
                                    },
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self.minReplicas <= self.replicas",
                                            "message": "minReplicas must not exceed replicas",
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
async def widgets(kube: KubeClient) -> AsyncIterator[tuple[str, str]]:
    """A fresh CRD; yields (plural, kind) once it is Established."""
    plural = f"widgets{uuid.uuid4().hex[:6]}s"
    crd = widget_crd(plural)
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}"
    await kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

    async def established() -> bool:
        conds = (await kube.get(path)).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    await wait_for(established, 30, "the CRD to be Established")
    yield plural, crd["spec"]["names"]["kind"]
    await kube.delete(path)


async def test_crd_cel_rule_rejects_invalid_object(
    kube: KubeClient, namespace: str, widgets: tuple[str, str]
) -> None:
    plural, kind = widgets
    coll = f"/apis/{GROUP}/v1/namespaces/{namespace}/{plural}"

    async def create(name: str, replicas: int, minimum: int) -> JSON:
        obj = {
            "apiVersion": f"{GROUP}/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "minReplicas": minimum},
        }
        return await kube.create(coll, obj)

    # The discovery of a fresh CRD can lag a moment behind Established.
    async def valid_created() -> JSON | None:
        try:
            return await create("ok", 3, 1)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    assert (await wait_for(valid_created, 30, "the CRD's endpoint"))["spec"]["replicas"] == 3
    with pytest.raises(ApiError) as info:
        await create("bad", 1, 5)
    assert info.value.status == 422
    assert info.value.reason == "Invalid"
    assert "minReplicas must not exceed replicas" in info.value.message
    with pytest.raises(ApiError) as info:
        await create("negative", -1, 0)
    assert info.value.status == 422
    assert "spec.replicas" in info.value.message


async def test_user_without_rbac_is_forbidden(
    cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    async with cluster.client(impersonate_user="mallory") as mallory:
        with pytest.raises(ApiError) as info:
            await mallory.get(pods)
        assert info.value.status == 403
        assert info.value.reason == "Forbidden"
        assert 'User "mallory" cannot list resource "pods"' in info.value.message

        await kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "mallory-view"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "view",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}
                ],
            },
        )

        async def allowed() -> bool:
            try:
                await mallory.get(pods)
            except ApiError as exc:
                if exc.status == 403:
                    return False
                raise
            return True

        await wait_for(allowed, 10, "the RoleBinding to take effect")


async def test_minted_client_certificate_user_is_forbidden(
    cluster: ClusterHandle, namespace: str
) -> None:
    kubeconfig = cluster.mint_kubeconfig("eve", ("developers",))
    async with KubeClient(load_kubeconfig(kubeconfig)) as eve:
        review = await eve.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == "eve"
        assert "developers" in review["status"]["userInfo"]["groups"]
        with pytest.raises(ApiError) as info:
            await eve.get(f"/api/v1/namespaces/{namespace}/secrets")
        assert info.value.status == 403


async def test_validating_admission_policy_denies(kube: KubeClient, namespace: str) -> None:
    name = f"deny-{namespace}"
    base = "/apis/admissionregistration.k8s.io/v1"
    await kube.create(
        f"{base}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.data) || !('forbidden' in object.data)",
                        "message": "the key 'forbidden' is not allowed",
                    }
                ],
            },
        },
    )
    await kube.create(
        f"{base}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    try:
        cms = f"/api/v1/namespaces/{namespace}/configmaps"
        attempt = 0

        async def denied() -> ApiError | None:
            nonlocal attempt
            attempt += 1
            obj = {"metadata": {"name": f"cm{attempt}"}, "data": {"forbidden": "x"}}
            try:
                await kube.create(cms, obj)
            except ApiError as exc:
                return exc
            return None

        err = await wait_for(denied, 20, "the policy to be enforced", interval=0.5)
        assert err.status in (403, 422)
        assert "the key 'forbidden' is not allowed" in err.message
    finally:
        await kube.delete(f"{base}/validatingadmissionpolicybindings/{name}")
        await kube.delete(f"{base}/validatingadmissionpolicies/{name}")
