"""Fixtures for tests that need a real Kubernetes API server.

Default: a session-wide devcluster (etcd + kube-apiserver + kube-controller-manager from
the binaries built by hack/k8s/ensure-binaries) with a real node (kubelet + containerd) when the
tests run inside ``python -m devcluster sandbox`` (what hack/test does), else the node agent
that runs pods as local processes (the fallback).
``E2E_CLUSTER=existing``: use the cluster in ``KUBECONFIG`` instead (e.g. kind), reached as the
product reaches it (``tests/cluster/kube_access.py``: merged files, ``OMA_E2E_CONTEXT``, exec
credential plugins); tests that need the local cluster (its nodes, its CA) are skipped there,
the stores and runner image come from the ``OMA_E2E_*`` variables described in
``tests/cluster/e2e_env.py``, and oma's CRDs and admission policies are installed only if absent
and never deleted or replaced when they were there (``tests/cluster/cluster_wide.py``).
Missing binaries skip these tests, unless ``OMA_REQUIRE_CLUSTER=1`` (CI) makes it an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devcluster import DevCluster, KubeClient, MissingBinaryError, NodeAgent
from devcluster.binaries import build_times, find_binary, find_tool
from devcluster.kubeconfig import load_kubeconfig
from oma_operator.k8s.kubeconfig import KubeconfigError
from tests.cluster.cluster_wide import ClusterWide
from tests.cluster.e2e_env import (
    EXISTING,
    REAL_NODE,
    REAL_NODE_IMAGE,
    Endpoint,
    SideEffects,
    endpoint_from_env,
    for_pods,
)
from tests.cluster.helpers import create_namespace, delete_namespace, with_pythonpath
from tests.cluster.kube_access import CONTEXT_VARIABLE, ProductKubeClient, existing_kubeconfig
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
_timings: dict[str, str] = {}


@dataclass
class ClusterHandle:
    """What tests may know about the cluster, whichever kind it is."""

    kubeconfig: Path
    local: DevCluster | None

    @contextlib.asynccontextmanager
    async def client(
        self, *, impersonate_user: str | None = None, impersonate_groups: tuple[str, ...] = ()
    ) -> AsyncIterator[KubeClient]:
        """A client as the kubeconfig's user (or impersonating another): devcluster's for its
        own cluster, the product's client on an existing one (``kube_access``)."""
        if self.local is not None:
            config = load_kubeconfig(self.kubeconfig)
            async with KubeClient(
                config, impersonate_user=impersonate_user, impersonate_groups=impersonate_groups
            ) as kube:
                yield kube
            return
        async with await ProductKubeClient.connect(
            self.kubeconfig,
            impersonate_user=impersonate_user,
            impersonate_groups=impersonate_groups,
        ) as kube:
            yield kube

    def mint_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        if self.local is None:
            pytest.skip("minting client certificates needs the local devcluster CA")
        return self.local.mint_kubeconfig(user, groups)

    @property
    def agent(self) -> NodeAgent:
        if self.local is None:
            pytest.skip("needs the local devcluster (not available with E2E_CLUSTER=existing)")
        if REAL_NODE:
            pytest.skip("tests the node agent itself (the fallback): it runs outside the sandbox")
        return self.local.agent

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (e.g. a node agent method) in the local cluster's event loop."""
        if self.local is None:
            coro.close()
            pytest.skip("needs the local devcluster (not available with E2E_CLUSTER=existing)")
        return await self.local.call(coro)

    async def kubelet_evict(self, kube: KubeClient, namespace: str, pod: str) -> None:
        """Have the node's kubelet evict ``pod``: on the real node by growing its logs past its
        ``ephemeral-storage`` limit (the pod must have one), on the node agent by its hook."""
        if not self.real_node:
            await self.call(self.agent.evict_pod(namespace, pod))
            return
        assert self.local is not None
        body = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        (node,) = [n for n in self.local.running.nodes if n.name == body["spec"]["nodeName"]]
        await asyncio.to_thread(node.fill_logs, namespace, pod, body["metadata"]["uid"], 40)

    async def kill_container(
        self, kube: KubeClient, namespace: str, pod: str, container: str = "runner"
    ) -> None:
        """SIGKILL a running container from outside (a crash: exit 137): on the real node
        through containerd, on the node agent its process group."""
        if not self.real_node:
            runner = self.agent.find(namespace, pod)
            proc = None if runner is None else runner.procs.get(container)
            assert proc is not None, f"{namespace}/{pod} has no running {container}"
            proc.kill_group()
            return
        assert self.local is not None
        body = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        (node,) = [n for n in self.local.running.nodes if n.name == body["spec"]["nodeName"]]
        killed = await self.call(node.kill_container(namespace, pod, container))
        assert killed, f"{namespace}/{pod} has no running {container} on {node.name}"

    async def add_tools(self, body: dict[str, Any], site: Path) -> None:
        """Give a TeamRun's runner the tool package in ``site`` (``helpers.tool_package``): on
        the node agent on ``PYTHONPATH`` (a local directory); on a real node in an image built
        ``FROM`` the runner image, as users ship their own tools (``spec.runner.image``)."""
        runner = body["spec"]["runner"]
        if not self.real_node:
            runner["env"].append({"name": "PYTHONPATH", "value": with_pythonpath(site)})
            return
        assert self.local is not None
        image = await asyncio.to_thread(_tools_image, site)
        await self.call(self.local.running.import_image(image))
        runner["image"] = image

    @property
    def real_node(self) -> bool:
        """Pods run as containers under a real kubelet (inside devcluster's sandbox)."""
        return self.local is not None and REAL_NODE

    def tool(self, name: str) -> str:
        path = find_tool(name)
        if path is None:
            pytest.skip(f"{name} not found: run hack/k8s/ensure-binaries or put it on PATH")
        return str(path)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    if EXISTING:
        # One private file with the chosen context, for the test process, kubectl, helm and
        # the operator processes alike; removed at the end.
        folder = Path(tempfile.mkdtemp(prefix="oma-e2e-"))
        try:
            yield _existing_cluster(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        names = ["etcd", "kube-apiserver", "kube-controller-manager"]
        for name in names + (["kubelet", "kube-scheduler"] if REAL_NODE else []):
            find_binary(name)
    except MissingBinaryError as exc:
        if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":
            raise
        pytest.skip(str(exc))
    if REAL_NODE:
        _ensure_runner_image()
    begin = time.monotonic()
    local = DevCluster(real_node=REAL_NODE).start()
    node = "a real node (kubelet + containerd)" if REAL_NODE else "node agent"
    _timings["warm start"] = f"{time.monotonic() - begin:.1f}s (control plane + {node})"
    try:
        yield ClusterHandle(local.kubeconfig, local)
    finally:
        local.stop()


def _existing_cluster(folder: Path) -> ClusterHandle:
    """The cluster of ``$KUBECONFIG`` (and ``OMA_E2E_CONTEXT``), once the product's client
    reached it."""
    listed, context = os.environ.get("KUBECONFIG", ""), os.environ.get(CONTEXT_VARIABLE) or None
    try:
        handle = ClusterHandle(existing_kubeconfig(listed, context, folder / "kubeconfig"), None)
    except KubeconfigError as exc:
        pytest.fail(f"E2E_CLUSTER=existing: {exc}", pytrace=False)

    async def whoami() -> str:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        async with handle.client() as kube:
            assert isinstance(kube, ProductKubeClient)
            made = await kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
            user = (made.get("status") or {}).get("userInfo") or {}
            return f"{kube.kube.server} as {user.get('username', '?')}"

    try:
        reached = asyncio.run(whoami())
    except Exception as exc:  # credentials, an exec plugin, the network, the server's answer
        where = f"context {context}" if context else "the current context"
        pytest.fail(
            f"E2E_CLUSTER=existing: cannot reach the cluster of {where} in "
            f"{listed or '~/.kube/config'}: {type(exc).__name__}: {exc}",
            pytrace=False,
        )
    _timings["cluster"] = f"existing cluster {reached}"
    return handle


@pytest.fixture(scope="session")
def cluster_wide(cluster: ClusterHandle) -> Iterator[ClusterWide | None]:
    """On an existing cluster, what this run installed cluster-wide (oma's CRDs and admission
    policies, each only when absent), removed at the end when nothing else depends on it (see
    ``cluster_wide.py``); None on the local cluster, which is the suite's own."""
    if cluster.local is not None:
        yield None
        return
    try:
        ledger = ClusterWide.from_env()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield ledger
    finally:

        async def release() -> None:
            async with cluster.client() as kube:
                await ledger.release(kube)

        try:
            asyncio.run(release())
        finally:
            if ledger.notes:
                _timings["cluster-wide objects"] = "; ".join(ledger.notes)


def _tools_image(site: Path) -> str:
    """``localhost/oma:dev`` plus ``site`` on its PYTHONPATH; named by content, built once."""
    podman = ["podman", "--storage-driver", "vfs"]
    base = subprocess.run(
        [*podman, "image", "inspect", "--format", "{{.Id}}", REAL_NODE_IMAGE],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    digest = hashlib.sha256(base.encode())
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(site)).encode() + b"\0" + path.read_bytes())
    name = f"localhost/oma-test-tools:{digest.hexdigest()[:12]}"
    if subprocess.run([*podman, "image", "exists", name], check=False).returncode == 0:
        return name
    context = site.parent / f"{site.name}-image"
    shutil.copytree(site, context / "site")
    (context / "Containerfile").write_text(
        f"FROM {REAL_NODE_IMAGE}\nCOPY site /opt/oma-test-tools\n"
        "ENV PYTHONPATH=/opt/oma-test-tools\n"
    )
    subprocess.run(
        [*podman, "build", "--network", "none", "-t", name, str(context)],
        check=True, capture_output=True,
    )  # fmt: skip
    return name


def _ensure_runner_image() -> None:
    """The real node runs runner pods from hack/build-image's image: build it if podman lacks it
    (the cluster imports it into the node's containerd)."""
    podman = ["podman", "--storage-driver", "vfs"]
    found = subprocess.run([*podman, "image", "exists", REAL_NODE_IMAGE], check=False)
    if found.returncode != 0:
        begin = time.monotonic()
        subprocess.run([str(REPO / "hack" / "build-image")], check=True)
        _timings["runner image"] = f"built in {time.monotonic() - begin:.0f}s"


@pytest.fixture(scope="session")
def e2e_redis(request: pytest.FixtureRequest) -> Endpoint:
    """The Redis that runner pods and the tests share (a store, and the side-effect lists)."""
    if EXISTING:
        return endpoint_from_env("OMA_E2E_REDIS_URL", "OMA_E2E_REDIS_LOCAL_URL", "a Redis URL")
    server: RedisServer = request.getfixturevalue("redis_server")
    return Endpoint(for_pods(server.url), server.url)


@pytest.fixture(scope="session")
def e2e_postgres(request: pytest.FixtureRequest) -> Endpoint:
    """The PostgreSQL that runner pods and the tests share."""
    if EXISTING:
        return endpoint_from_env(
            "OMA_E2E_POSTGRES_DSN", "OMA_E2E_POSTGRES_LOCAL_DSN", "a PostgreSQL DSN"
        )
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return Endpoint(for_pods(server.dsn()), server.dsn())


@pytest.fixture
def effects(e2e_redis: Endpoint) -> SideEffects:
    """This test's own ledger and tally lists."""
    return SideEffects.fresh(e2e_redis)


@pytest.fixture
async def kube(cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    async with cluster.client() as client:
        yield client


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh namespace whose ``default`` ServiceAccount exists (pods need it); deleted at the
    end unless the test deleted it itself."""
    name = await create_namespace(kube)
    yield name
    await delete_namespace(kube, name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _timings:
        return
    cold = build_times()
    terminalreporter.section("kubernetes test cluster")
    if cold:
        terminalreporter.write_line(f"cold build of binaries (hack/k8s/ensure-binaries): {cold}")
    for key, value in _timings.items():
        terminalreporter.write_line(f"{key}: {value}")
