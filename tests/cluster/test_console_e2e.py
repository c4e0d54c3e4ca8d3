"""The console with the operator on the real node: reviewers decide a gated payment in a real
headless Chromium, each as themselves (their own kubeconfig, ``oma console`` as they would run
it), and the API server's RBAC and reviewer policy decide who may.

alice (a named reviewer) sees the request with what changed since the one she rejected, approves
it, and the payment runs once; bob (allowed by RBAC, not a reviewer) sees it and is refused by
the API server, on the page; eve (reviewer in another namespace) does not see it at all. A
request whose content changes in the store after the page showed it is not decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page

from devcluster import KubeClient
from oma.approval.ledger import approval_key
from oma.approval.models import hash_approval_request
from tests.cluster.approval_kit import (
    DECISIONS,
    KUBECTL_PATCH,
    admission_policies,
    grant_reviewers,
    kubectl_as,
    ledger_row,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.console_kit import browser, console, screenshot
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import create_namespace, delete_namespace, run_tool, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    teamrun,
)

pytestmark = pytest.mark.cluster
__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]


def payments(name: str, effects: SideEffects, *amounts: int) -> dict[str, Any]:
    """A TeamRun whose clerk calls ledger_append once per amount, each gated, alice deciding."""
    calls: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "id": f"pay{i}",
                    "name": "ledger_append",
                    "input": {"entry": f"pay {a}", "amount": a},
                }
            ]
        }
        for i, a in enumerate(amounts)
    ]
    body = teamrun(name, [*calls, {"text": "paid"}], effects)
    body["spec"]["approvals"] = {
        "tools": ["ledger_append"],
        "reviewers": {"default": {"users": ["alice"]}},
    }
    return body


async def waiting(kube: KubeClient, namespace: str, run: str, *not_these: str) -> dict[str, Any]:
    """The verified, Pending ApprovalDecision of ``run`` not named in ``not_these``."""

    async def found() -> dict[str, Any] | None:
        listed = await kube.get(
            DECISIONS.format(ns=namespace), labelSelector=f"oma.dev/teamrun={run}"
        )
        for item in listed.get("items", []):
            status, spec = item.get("status") or {}, item["spec"]
            fresh = item["metadata"]["name"] not in not_these
            if fresh and status.get("verified") and spec.get("decision") == "Pending":
                decision: dict[str, Any] = item
                return decision
        return None

    return await wait_for(found, 120, f"a request of {run} to decide")


async def open_request(page: Page, link: str, namespace: str, name: str) -> None:
    await page.goto(link)
    await page.click(f'#inbox-rows tr[data-request="{namespace}/{name}"] a')
    await page.wait_for_selector("#content")


@pytest.mark.timeout(420)
async def test_alice_approves_with_the_diff_bob_is_refused_and_eve_sees_nothing(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    await grant_reviewers(kube, namespace, "alice", "bob")
    elsewhere = await create_namespace(kube)
    await grant_reviewers(kube, elsewhere, "eve")
    body = payments("pay", effects, 7, 9)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    first = await waiting(kube, namespace, "pay")
    rejected = {"spec": {"decision": "Rejected", "reviewer": "alice", "reason": "wrong amount"}}
    await run_tool(
        *kubectl_as(cluster, "alice"),
        *("-n", namespace, *KUBECTL_PATCH, json.dumps(rejected), first["metadata"]["name"]),
    )
    second = await waiting(kube, namespace, "pay", first["metadata"]["name"])
    name = second["metadata"]["name"]
    path = f"{DECISIONS.format(ns=namespace)}/{name}"
    try:
        async with browser() as chromium:
            async with console(
                "--kubeconfig", str(cluster.mint_kubeconfig("eve")), "-n", elsewhere
            ) as eve:
                page = await chromium.new_page()
                await page.goto(eve.launch)
                await page.wait_for_selector("#inbox-rows tr.empty")
                assert name not in await page.inner_text("#inbox-rows")
                await page.goto(f"{eve.url}/decisions/{namespace}/{name}")
                assert "forbidden" in (await page.inner_text("main")).lower()
                assert "ledger_append" not in await page.inner_text("main")

            async with console(
                "--kubeconfig", str(cluster.mint_kubeconfig("bob")), "-n", namespace
            ) as bob:
                page = await chromium.new_page()
                await open_request(page, bob.launch, namespace, name)
                await page.click("#approve")
                error = await page.inner_text("#error")
                assert error.startswith("refused: Kubernetes API answered 403"), error
                assert "you are not a reviewer of this request" in error, error
                await screenshot(page, "decision-refused", tmp_path)
            assert (await kube.get(path))["spec"]["decision"] == "Pending"

            async with console(
                "--kubeconfig", str(cluster.mint_kubeconfig("alice")), "-n", namespace
            ) as alice:
                page = await chromium.new_page()
                await page.set_viewport_size({"width": 1100, "height": 800})
                await open_request(page, alice.launch, namespace, name)
                changes = await page.inner_text("#diff")
                assert "/input/amount" in changes and "7" in changes and "9" in changes
                assert await page.inner_text("#task") == "Record"
                await screenshot(page, "decision", tmp_path)
                await page.fill("#reason", "invoice 42")
                await page.click("#approve")
                done = await page.inner_text("#done")
                assert done == "Approved by alice, recorded by the operator", done
    finally:
        await delete_namespace(kube, elsewhere)
    final = await finished(kube, namespace, "pay", 180)
    assert final["phase"] == "Succeeded"
    assert await effects.ledger() == ["pay 9"]  # the payment alice approved, once
    recorded = await kube.get(path)
    assert (recorded["status"]["decision"], recorded["status"]["reviewer"]) == ("Approved", "alice")
    row = await ledger_row(e2e_redis, body, namespace, second["spec"]["requestId"])
    assert row.decision.reviewer.id == "alice" and row.decision.reason == "invoice 42"


@pytest.mark.timeout(300)
async def test_a_request_changed_in_the_store_after_the_page_showed_it_is_not_decided(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    body = payments("swap", effects, 7)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    shown = await waiting(kube, namespace, "swap")
    name, request_id = shown["metadata"]["name"], shown["spec"]["requestId"]
    async with (
        browser() as chromium,
        console("--kubeconfig", str(cluster.mint_kubeconfig("alice")), "-n", namespace) as alice,
    ):
        page = await chromium.new_page()
        await open_request(page, alice.launch, namespace, name)
        assert '"pay 7"' in await page.inner_text("#content")
        # Someone with the store's credentials rewrites the request (a consistent forgery:
        # content and hash together), after the page rendered.
        store = teamrun_store(e2e_redis, body, namespace)
        try:
            entry = await store.get(approval_key(request_id))
            assert entry is not None
            row = json.loads(entry.value)
            request = row["request"]
            for part in ("input", "rawInput"):
                request["content"][part] |= {"entry": "pay 7000", "amount": 7000}
            request["requestHash"] = hash_approval_request(
                request["scope"], request["boundary"], request["content"]
            )
            assert await store.compare_and_set(entry.key, entry.value, json.dumps(row))
        finally:
            await store.aclose()
        await page.click("#approve")
        error = await page.inner_text("#error")
        # The forged row no longer matches its request id (the id binds run, scope, boundary and
        # hash): the operator records nothing and says why on the resource, which the page shows.
        assert error.startswith("refused: your decision"), error
        assert "not recorded" in error and "cannot be read" in error, error
    assert await effects.ledger() == []  # nothing ran
    store = teamrun_store(e2e_redis, body, namespace)
    try:  # and nothing was recorded on the forged row
        entry = await store.get(approval_key(request_id))
        assert entry is not None and json.loads(entry.value).get("decision") is None
    finally:
        await store.aclose()
    resource = await kube.get(f"{DECISIONS.format(ns=namespace)}/{name}")
    assert resource["status"]["recorded"] is False
