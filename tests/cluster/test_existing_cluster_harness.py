"""The e2e harness against an existing cluster touches only what it made, and reaches the
cluster as the product does.

Here the "user's cluster" is this session's devcluster: it holds the user's CRDs (installed as
shipped), admission policies, a namespace with a TeamRun and an ApprovalDecision. A child pytest
runs part of the suite with ``E2E_CLUSTER=existing`` against it, knowing it only through a
``$KUBECONFIG`` of two files whose user is an exec credential plugin (and a first file whose
current context points nowhere, so ``OMA_E2E_CONTEXT`` must choose); afterwards the user's
objects, CRDs and policies are exactly as they were, and the child's namespaces are going.
The other tests drive the pieces directly: the kubeconfig a run uses, the product's client under
the tests' interface, and ``ClusterWide`` installing only what is absent, removing only what it
installed and only when nothing is left in it, and refusing to replace what differs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from devcluster.kube import JSON, ApiError, KubeClient
from devcluster.kubeconfig import load_kubeconfig
from oma_operator.approvals.rules.resources import decision_manifest
from oma_operator.k8s.kubeconfig import KubeconfigError
from oma_operator.resources.admission import DEPLOY_FILE
from oma_operator.resources.bodies import teamrun_view
from oma_operator.resources.crdgen import approvaldecision_crd, teamrun_crd
from tests.cluster.approval_kit import (
    ADMISSION,
    DECISIONS,
    admission_policies,
    tool_request,
)
from tests.cluster.cluster_wide import (
    CRDS,
    MODE_VARIABLE,
    ClusterWide,
    ClusterWideMismatch,
    matches,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import REAL_NODE_IMAGE, Endpoint
from tests.cluster.helpers import (
    create_namespace,
    delete_namespace,
    exec_kubeconfig,
    get_or_none,
    outcomes,
    run_tool,
    wait_for,
)
from tests.cluster.kube_access import CONTEXT_VARIABLE, ProductKubeClient, existing_kubeconfig
from tests.cluster.operator_kit import TEAMRUNS, crds_installed, create_admitted, teamrun

__all__ = ["admission_policies", "crds_installed"]  # fixtures
pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SUCCEEDS = "tests/cluster/test_operator_e2e.py::test_teamrun_succeeds"
NEEDS_POLICIES = "tests/cluster/test_cli_decisions.py::test_unknown_name_is_refused"


def managed_kubeconfig(source: Path, folder: Path) -> str:
    """``source``'s cluster as a managed cluster's users have it (``helpers.exec_kubeconfig``:
    two files, an exec plugin), behind a first file whose current context is a dead server:
    the merged current-context is that one, so the run must be told ``plugin``."""
    listed, _ = exec_kubeconfig(source, folder)
    elsewhere = folder / "elsewhere.kubeconfig"
    elsewhere.write_text(
        yaml.safe_dump(
            {
                "current-context": "elsewhere",
                "clusters": [{"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "nobody", "user": {"token": "x"}}],
                "contexts": [
                    {"name": "elsewhere", "context": {"cluster": "dead", "user": "nobody"}}
                ],
            }
        )
    )
    return f"{elsewhere}{os.pathsep}{listed}"


def test_the_kubeconfig_of_a_run_is_the_merged_files_cut_to_one_context(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "first", tmp_path / "b" / "second"
    first.parent.mkdir()
    second.parent.mkdir()
    first.write_text(
        yaml.safe_dump(
            {
                "current-context": "one",
                "clusters": [
                    {
                        "name": "c1",
                        "cluster": {"server": "https://one", "certificate-authority": "ca"},
                    }
                ],
            }
        )
    )
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "two",
                "clusters": [{"name": "c1", "cluster": {"server": "https://shadowed"}}],
                "users": [
                    {"name": "u", "user": {"exec": {"command": "./plugin", "apiVersion": "v"}}}
                ],
                "contexts": [
                    {"name": "one", "context": {"cluster": "c1", "user": "u"}},
                    {"name": "two", "context": {"cluster": "c2", "user": "u"}},
                ],
            }
        )
    )
    listed = f"{first}{os.pathsep}{second}"
    made = existing_kubeconfig(listed, None, tmp_path / "out" / "kubeconfig")
    assert made.stat().st_mode & 0o777 == 0o600
    config = yaml.safe_load(made.read_text())
    # kubectl's rules: the first file's current-context and cluster c1 win; paths made absolute
    # relative to the file that holds them (the CA beside the first, the plugin beside the second).
    assert config["current-context"] == "one"
    ca = str(first.parent / "ca")
    assert config["clusters"] == [
        {"name": "c1", "cluster": {"server": "https://one", "certificate-authority": ca}}
    ]
    assert config["users"][0]["user"]["exec"]["command"] == str(second.parent / "plugin")
    assert [c["name"] for c in config["contexts"]] == ["one"]
    with pytest.raises(KubeconfigError, match="no entry named 'c2' in clusters"):
        existing_kubeconfig(listed, "two", tmp_path / "out" / "kubeconfig")
    with pytest.raises(KubeconfigError, match="no entry named 'three' in contexts"):
        existing_kubeconfig(listed, "three", tmp_path / "out" / "kubeconfig")
    with pytest.raises(KubeconfigError, match="no kubeconfig at"):
        existing_kubeconfig(str(tmp_path / "none"), None, tmp_path / "out" / "kubeconfig")


def test_an_object_matches_when_only_the_servers_defaults_differ() -> None:
    desired = {"spec": {"a": 1, "off": False, "columns": [{"name": "x", "priority": 0}]}}
    live = {"spec": {"a": 1, "conversion": {"strategy": "None"}, "columns": [{"name": "x"}]}}
    assert matches(desired, live)
    assert not matches(desired, {"spec": {**live["spec"], "a": 2}})
    assert not matches(desired, {"spec": {"a": 1, "columns": []}})
    assert not matches({"spec": {"columns": [{"name": "x"}, {"name": "y"}]}}, live)


async def test_the_harness_client_reaches_the_cluster_with_an_exec_plugin_and_two_files(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    if cluster.local is None:
        pytest.skip("needs the local devcluster's admin credentials for the plugin to print")
    listed = managed_kubeconfig(cluster.kubeconfig, tmp_path / "exec")
    made = existing_kubeconfig(listed, "plugin", tmp_path / "run" / "kubeconfig")
    with pytest.raises(ValueError, match="exec/auth-provider credentials are not supported"):
        load_kubeconfig(made)  # devcluster's own reader: what the harness used before
    handle = ClusterHandle(made, None)  # as on an existing cluster
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with handle.client() as client:
        assert isinstance(client, ProductKubeClient)
        me = await client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        admin = await kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        assert me["status"]["userInfo"]["username"] == admin["status"]["userInfo"]["username"]
        # The tests' interface: create, get, patch, watch, errors with the server's Status.
        maps = f"/api/v1/namespaces/{namespace}/configmaps"
        created = await client.create(maps, {"metadata": {"name": "m"}, "data": {"k": "1"}})
        await client.patch(f"{maps}/m", {"data": {"k": "2"}})
        assert (await client.get(f"{maps}/m"))["data"] == {"k": "2"}
        assert "m" in {m["metadata"]["name"] for m in (await client.get(maps))["items"]}
        with pytest.raises(ApiError) as refused:
            await client.create(maps, {"metadata": {"name": "m"}})
        assert (refused.value.status, refused.value.reason) == (409, "AlreadyExists")
        assert not await client.exists(f"{maps}/absent")
        events = client.watch(maps, created["metadata"]["resourceVersion"], timeout_seconds=5)
        event = await anext(aiter(events))
        await events.aclose()  # type: ignore[attr-defined]  # an async generator
        assert (event["type"], event["object"]["data"]) == ("MODIFIED", {"k": "2"})
    async with handle.client(impersonate_user="mallory") as mallory:
        with pytest.raises(ApiError) as forbidden:
            await mallory.get(maps)
        assert forbidden.value.status == 403 and 'User "mallory"' in forbidden.value.message
    # kubectl reads the same one file (exec plugin included).
    kubectl = [cluster.tool("kubectl"), f"--kubeconfig={made}", "-n", namespace]
    got = await run_tool(*kubectl, "get", "configmap", "m", "-o", "name")
    assert got.strip() == "configmap/m"
    assert int((tmp_path / "exec" / "plugin-runs").read_text()) >= 2  # our client, kubectl
    # Without the context, the merged current-context is the dead server's: refused to connect.
    dead = existing_kubeconfig(listed, None, tmp_path / "dead" / "kubeconfig")
    async with ClusterHandle(dead, None).client() as nowhere:
        with pytest.raises(Exception, match=r"(?i)connect"):
            await nowhere.get(maps)


def widget_crd(group: str, columns: int = 1) -> dict[str, Any]:
    """A throwaway namespaced CRD (what ``ClusterWide`` does is the same for oma's)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "additionalPrinterColumns": [
                        {"name": f"C{n}", "type": "string", "jsonPath": f".spec.c{n}"}
                        for n in range(columns)
                    ],
                }
            ],
        },
    }


async def served(kube: KubeClient, group: str) -> None:
    async def probe() -> bool:
        try:
            await kube.get(f"/apis/{group}/v1/gadgets")
        except ApiError as exc:
            if exc.status in (404, 429, 503):  # 429: "storage is (re)initializing"
                return False
            raise
        return True

    await wait_for(probe, 30, f"gadgets.{group} to be served")


def gadget(group: str, name: str) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": {}}


@pytest.mark.timeout(180)
async def test_a_crd_it_installed_goes_only_when_nothing_else_is_left_in_it(
    cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.e2e.oma.dev"
    crd = widget_crd(group)
    path = f"{CRDS}/{crd['metadata']['name']}"
    gadgets = f"/apis/{group}/v1/namespaces/{{ns}}/gadgets"
    ledger = ClusterWide()
    try:
        assert await ledger.ensure(kube, CRDS, crd) == "installed"
        assert await ledger.ensure(kube, CRDS, crd) == "found"  # a later module: its own
        await served(kube, group)
        # The suite's own objects, in a namespace being deleted, are waited for; a user's
        # object keeps the CRD in place.
        going = await create_namespace(kube)
        await kube.create(gadgets.format(ns=going), gadget(group, "ours"))
        await kube.create(gadgets.format(ns=namespace), gadget(group, "theirs"))
        await delete_namespace(kube, going)
        await ledger.release(kube, wait=3)
        assert await kube.exists(path)
        assert any(f"{namespace}/theirs" in note for note in ledger.notes), ledger.notes
        await kube.delete(f"{gadgets.format(ns=namespace)}/theirs")
        await ledger.release(kube, wait=60)  # "ours" goes with its namespace, then the CRD
        gone = await get_or_none(kube, path)
        assert gone is None or gone["metadata"].get("deletionTimestamp")
        removed = (
            f"removed CustomResourceDefinition {crd['metadata']['name']} (installed by this run)"
        )
        assert removed in ledger.notes, ledger.notes
    finally:
        await kube.delete_if_present(path)


@pytest.mark.timeout(180)
async def test_a_crd_that_was_there_is_never_deleted_and_replaced_only_when_asked(
    kube: KubeClient, namespace: str
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.e2e.oma.dev"
    theirs = widget_crd(group)  # the user's, an "older" version: one column fewer
    path = f"{CRDS}/{theirs['metadata']['name']}"
    await kube.create(CRDS, theirs)
    try:
        await served(kube, group)
        gadgets = f"/apis/{group}/v1/namespaces/{namespace}/gadgets"
        kept = await kube.create(gadgets, gadget(group, "kept"))
        before = await kube.get(path)
        ours = widget_crd(group, columns=2)
        assert await ClusterWide().ensure(kube, CRDS, theirs) == "found"  # it matches
        with pytest.raises(ClusterWideMismatch, match=f"{MODE_VARIABLE}=use"):
            await ClusterWide().ensure(kube, CRDS, ours)
        assert await ClusterWide("use").ensure(kube, CRDS, ours) == "found"
        unchanged = await kube.get(path)
        assert unchanged["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        upgrading = ClusterWide("upgrade")
        assert await upgrading.ensure(kube, CRDS, ours) == "upgraded"
        after = await kube.get(path)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
        assert len(after["spec"]["versions"][0]["additionalPrinterColumns"]) == 2
        await upgrading.release(kube)  # it installed nothing: nothing goes
        again = await kube.get(f"{gadgets}/kept")
        assert again["metadata"]["uid"] == kept["metadata"]["uid"]
        assert (await kube.get(path))["metadata"]["uid"] == before["metadata"]["uid"]
    finally:
        await kube.delete(path)


@pytest.mark.timeout(600)
async def test_an_existing_cluster_run_leaves_the_users_teamruns_crds_and_policies_alone(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    admission_policies: None,
    e2e_redis: Endpoint,
    e2e_postgres: Endpoint,
    tmp_path: Path,
) -> None:
    if cluster.local is None:
        pytest.skip("drives existing-cluster mode against the local devcluster")
    # The user's: the CRDs and policies (installed by the fixtures, as shipped), and in their
    # namespace a TeamRun that nothing runs and an ApprovalDecision of it.
    await create_admitted(kube, namespace, teamrun("users-run", []))
    run = await kube.get(f"{TEAMRUNS.format(ns=namespace)}/users-run")
    request = tool_request(run["spec"]["runId"])
    manifest = decision_manifest(teamrun_view(run), request)
    # devcluster's client takes plain JSON (dict[str, Any]), which a TypedDict is not
    decision = await kube.create(DECISIONS.format(ns=namespace), cast(JSON, manifest))
    crds = [f"{CRDS}/{crd['metadata']['name']}" for crd in (teamrun_crd(), approvaldecision_crd())]
    policies = []
    for doc in yaml.safe_load_all(DEPLOY_FILE.read_text()):
        kind = doc["kind"].lower()
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        policies.append(f"{ADMISSION}/{plural}/{doc['metadata']['name']}")
    users = [
        f"{TEAMRUNS.format(ns=namespace)}/users-run",
        f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}",
    ]
    theirs = [*users, *crds, *policies]

    async def state() -> dict[str, tuple[Any, ...]]:
        """Each object's uid, generation and spec; the namespaced ones' resourceVersion too (a
        cluster-wide object's status, written by the API server, may move it)."""
        found = {}
        for path in theirs:
            body = await kube.get(path)
            meta = body["metadata"]
            version = meta["resourceVersion"] if path in users else None
            found[path] = (meta["uid"], version, meta.get("generation"), body.get("spec"))
        return found

    before = await state()
    namespaces = {n["metadata"]["name"] for n in (await kube.get("/api/v1/namespaces"))["items"]}

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMA_E2E_", "OMA_LEDGER_", "OMA_TALLY_"))
    }
    env |= {
        "E2E_CLUSTER": "existing",
        "KUBECONFIG": managed_kubeconfig(cluster.kubeconfig, tmp_path / "managed"),
        CONTEXT_VARIABLE: "plugin",
        "OMA_E2E_REDIS_URL": e2e_redis.for_pods,
        "OMA_E2E_POSTGRES_DSN": e2e_postgres.for_pods,
        "OMA_E2E_RUNNER_IMAGE": REAL_NODE_IMAGE if cluster.real_node else "localhost/oma:e2e-check",
    }
    junit = tmp_path / "junit.xml"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"),
        *(SUCCEEDS, NEEDS_POLICIES),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await child.communicate())[0].decode(errors="replace")
    assert child.returncode == 0, output[-4000:]
    after = await state()
    assert {p for p in theirs if after[p] != before[p]} == set(), (before, after)
    # The child's own namespaces are all being deleted (or gone); the user's stays.
    listed = (await kube.get("/api/v1/namespaces"))["items"]
    left = [
        n["metadata"]["name"]
        for n in listed
        if n["metadata"]["name"] not in namespaces and not n["metadata"].get("deletionTimestamp")
    ]
    assert left == [], left
    assert await get_or_none(kube, f"/api/v1/namespaces/{namespace}") is not None
    results = outcomes(junit)
    assert results["test_teamrun_succeeds"][0] == "passed", output[-4000:]
    outcome, reason = results["test_unknown_name_is_refused"]  # after its policies were ensured
    assert outcome == "skipped" and "needs the local devcluster CA" in reason, reason
    # Its summary says what it did cluster-wide: used what was there, installed nothing.
    (said,) = [line for line in output.splitlines() if line.startswith("cluster-wide objects:")]
    assert "used CustomResourceDefinition teamruns.oma.dev as found" in said, said
    assert "installed" not in said and "removed" not in said, said
