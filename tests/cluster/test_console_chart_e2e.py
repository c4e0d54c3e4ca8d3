"""The chart's console on the real node: a pod with no service account token of its own, where
each user signs in with their own bearer token and sees what their RBAC shows them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from devcluster import KubeClient
from devcluster.kube import JSON
from tests.cluster.approval_kit import grant_reviewers, published_decision, tool_request
from tests.cluster.conftest import ClusterHandle
from tests.cluster.console_kit import browser, screenshot
from tests.cluster.e2e_env import REAL_NODE, REAL_NODE_IMAGE
from tests.cluster.helpers import create_namespace, delete_namespace, wait_for
from tests.cluster.operator_kit import crds_installed
from tests.cluster.operators import CHART, helm

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not REAL_NODE, reason="needs the real node (python -m devcluster sandbox)"),
]
__all__ = ["crds_installed"]
CONSOLE_PODS = "app.kubernetes.io/component=console"


async def _console_pod(kube: KubeClient, namespace: str) -> JSON | None:
    listed = await kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=CONSOLE_PODS)
    for pod in listed["items"]:
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
        if conditions.get("Ready") == "True":
            found: JSON = pod
            return found
    return None


async def _token(kube: KubeClient, namespace: str, account: str) -> str:
    """A bearer token of a new ServiceAccount (what ``kubectl create token`` gives)."""
    accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    await kube.create(
        accounts, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    issued = await kube.create(f"{accounts}/{account}/token", request)
    token: str = issued["status"]["token"]
    return token


@pytest.mark.timeout(300)
async def test_the_charts_console_signs_each_user_in_with_their_own_token(
    cluster: ClusterHandle, kube: KubeClient, crds_installed: None, tmp_path: Path
) -> None:
    namespace = await create_namespace(kube)
    await kube.patch(
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    release = f"c{uuid.uuid4().hex[:6]}"
    repository, tag = REAL_NODE_IMAGE.rsplit(":", 1)
    values = [
        f"image.repository={repository}",
        f"image.tag={tag}",
        "operator.replicas=0",
        "approvals.reviewerPolicy=false",
        "console.enabled=true",
    ]
    try:
        await asyncio.to_thread(
            helm, cluster, "install", release, str(CHART), "-n", namespace, "--wait=false",
            *[arg for value in values for arg in ("--set", value)],
        )  # fmt: skip
        reviewer = "alice"
        await grant_reviewers(kube, namespace, f"system:serviceaccount:{namespace}:{reviewer}")
        token = await _token(kube, namespace, reviewer)
        outsider = await _token(kube, namespace, "nobody")  # a valid token without any RBAC
        published = await published_decision(kube, namespace, tool_request(amount=21))
        name = published["metadata"]["name"]
        pod = await wait_for(lambda: _console_pod(kube, namespace), 180, "the console pod")
        volumes = [v["name"] for v in pod["spec"].get("volumes") or []]
        assert not any(v.startswith("kube-api-access") for v in volumes), volumes  # no own token
        site = f"http://{pod['status']['podIP']}:8080"
        async with browser() as chromium:
            page = await chromium.new_page()
            await page.goto(f"{site}/inbox")
            assert page.url == f"{site}/signin"
            await page.fill("#token", "not-a-token")
            await page.click("button[type=submit]")
            assert "not signed in" in await page.inner_text("#error")
            await page.fill("#token", outsider)
            await page.fill("#namespaces", namespace)
            await page.click("button[type=submit]")
            await page.wait_for_selector("#inbox-rows tr.empty")  # RBAC shows nobody nothing
            await (await chromium.new_context()).close()
            page = await (await chromium.new_context()).new_page()
            await page.goto(f"{site}/signin")
            await page.fill("#token", token)
            await page.fill("#namespaces", namespace)
            await page.click("button[type=submit]")
            await page.wait_for_selector(f'#inbox-rows tr[data-request="{namespace}/{name}"]')
            assert await page.inner_text("#who") == f"system:serviceaccount:{namespace}:{reviewer}"
            assert token not in await page.content()
            await screenshot(page, "signed-in-inbox", tmp_path)
    finally:
        await asyncio.to_thread(helm, cluster, "uninstall", release, "-n", namespace, check=False)
        await delete_namespace(kube, namespace)
