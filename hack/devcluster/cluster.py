"""Control plane + node agent together, in the caller's loop or in a background thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from devcluster import images
from devcluster.binaries import cache_root, k8s_version
from devcluster.controlplane import ControlPlane, ControlPlaneOptions
from devcluster.errors import StartupError
from devcluster.kube import ApiError, KubeClient
from devcluster.kubeconfig import load_kubeconfig
from devcluster.nodeagent import DEFAULT_MAX_PODS, NodeAgent
from devcluster.realnode import NodeSettings, RealNode
from devcluster.sandbox import sandbox_id

T = TypeVar("T")


@dataclass
class Running:
    control_plane: ControlPlane
    agent: NodeAgent | None
    start_seconds: float
    nodes: list[RealNode] = field(default_factory=list)

    async def add_real_node(self, name: str, labels: dict[str, str] | None = None) -> RealNode:
        """Another containerd + kubelet pair (inside the sandbox); Ready when this returns."""
        cp = self.control_plane
        assert cp.ca is not None
        sandbox = sandbox_id()
        if sandbox is None:
            raise StartupError("a real node runs only inside devcluster.sandbox")
        used = {node.settings.index for node in self.nodes}
        index = next(i for i in range(len(used) + 1) if i not in used)  # its cache is warm
        settings = NodeSettings(name, index, dict(labels or {}))
        node = RealNode(settings, cp.workdir, cp.ca, cp.server, sandbox)
        self.nodes.append(node)
        async with KubeClient(load_kubeconfig(cp.admin_kubeconfig)) as client:
            archives = cache_root() / "realnode" / "archives"
            extra = await asyncio.to_thread(images.podman_image, archives, images.OMA_IMAGE)
            await node.start(client, [extra] if extra is not None else [])
        return node

    async def import_image(self, name: str) -> None:
        """Import podman's image ``name`` into every real node's containerd (made after the
        nodes started, e.g. an image of the user's own tools)."""
        archives = cache_root() / "realnode" / "archives"
        source = await asyncio.to_thread(images.podman_image, archives, name)
        if source is None:
            raise StartupError(f"podman has no image {name}")
        for node in self.nodes:
            stamps = node.cache / "imported.json"
            await asyncio.to_thread(images.ensure_imported, node.ctr, stamps, [source])

    async def remove_real_node(self, node: RealNode) -> None:
        """Stop the node and its containers and delete its Node object."""
        if node in self.nodes:
            self.nodes.remove(node)
        await node.stop()
        async with KubeClient(load_kubeconfig(self.control_plane.admin_kubeconfig)) as client:
            with contextlib.suppress(ApiError):
                await client.delete(f"/api/v1/nodes/{node.name}")


@contextlib.asynccontextmanager
async def running_cluster(
    workdir: Path | None = None,
    *,
    node_name: str = "devcluster-node",
    with_agent: bool = True,
    options: ControlPlaneOptions | None = None,
    max_pods: int | None = DEFAULT_MAX_PODS,
    real_node: bool = False,
) -> AsyncIterator[Running]:
    """Start everything; on exit (or error, or cancellation) stop everything.

    ``real_node``: a kubelet and containerd (inside ``devcluster.sandbox``) instead of the node
    agent. ``max_pods`` caps the node agent's unfinished pods (the kubelet's ``--max-pods``).
    """
    begin = time.monotonic()
    if real_node:
        options = options or ControlPlaneOptions()
        options.real_node = True
    cp = ControlPlane(workdir, options)
    client: KubeClient | None = None
    agent: NodeAgent | None = None
    running: Running | None = None
    try:
        await cp.start()
        if real_node:
            running = Running(cp, None, 0.0)
            await running.add_real_node(node_name)
        elif with_agent:
            client = KubeClient(load_kubeconfig(cp.admin_kubeconfig))
            agent = NodeAgent(
                client, cp.workdir, node_name, version=k8s_version(), max_pods=max_pods
            )
            await agent.start()
        running = running or Running(cp, agent, 0.0)
        running.start_seconds = time.monotonic() - begin
        yield running
    finally:
        for node in reversed(running.nodes if running else []):
            await node.stop()
        if agent is not None:
            await agent.stop()
        if client is not None:
            await client.aclose()
        await cp.stop()


class DevCluster:
    """A cluster living in its own thread and event loop (for pytest and other sync code).

    ``call(coro)`` runs a coroutine (e.g. ``cluster.agent.evict_pod(...)``) in that loop.
    """

    def __init__(self, workdir: Path | None = None, **kwargs: Any) -> None:
        self._workdir = workdir
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._running: Running | None = None

    @property
    def running(self) -> Running:
        if self._running is None:
            raise StartupError("the cluster is not running")
        return self._running

    @property
    def kubeconfig(self) -> Path:
        return self.running.control_plane.admin_kubeconfig

    @property
    def agent(self) -> NodeAgent:
        agent = self.running.agent
        if agent is None:
            raise StartupError("this cluster runs without a node agent")
        return agent

    def start(self, timeout: float = 180.0) -> DevCluster:
        self._thread = threading.Thread(target=self._thread_main, name="devcluster", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise StartupError(f"the cluster did not start within {timeout:.0f}s")
        if self._error is not None:
            self._thread.join(30)
            raise self._error
        return self

    def stop(self, timeout: float = 60.0) -> None:
        if self._loop is not None and self._stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
        self._running = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` in the cluster's loop and wait for it from sync code."""
        return self._submit(coro).result(timeout)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` in the cluster's loop and await it from another loop."""
        return await asyncio.wrap_future(self._submit(coro))

    def mint_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        return self.running.control_plane.mint_kubeconfig(user, groups)

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop is None:
            coro.close()
            raise StartupError("the cluster is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with running_cluster(self._workdir, **self._kwargs) as running:
                self._running = running
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()
