"""A stand-in kubelet: registers a Node, keeps it alive, binds and runs pods as processes."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import platform
import shutil
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

import httpx

from devcluster.kube import JSON, ApiError, KubeClient
from devcluster.podrunner import HOST_IP, PodRunner
from devcluster.podstatus import now

log = logging.getLogger("devcluster.node")
LEASE_NS = "kube-node-lease"
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
DEFAULT_MAX_PODS = 110  # the kubelet's default --max-pods
_DONE = ("Succeeded", "Failed")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _memory_ki() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 8 * 1024 * 1024


class NodeAgent:
    """``await start()`` registers and begins serving; ``await stop()`` kills every pod process.

    Simulations for tests: ``evict_pod`` (kubelet-side eviction) and ``partition``/``heal``
    (node loss: heartbeats and API traffic stop while processes keep running).

    ``max_pods`` (the Node's ``pods`` capacity, 110 like the kubelet's default) caps the pods
    that are bound and not finished; pending pods beyond it stay unbound (``Pending``, as with
    a scheduler that finds no room) and are bound as running ones finish. ``None``: no cap.
    """

    def __init__(
        self,
        client: KubeClient,
        workdir: Path,
        name: str = "devcluster-node",
        *,
        labels: Mapping[str, str] | None = None,
        heartbeat_seconds: float = 5.0,
        inherit_env: tuple[str, ...] = INHERITED_ENV,
        version: str = "v0.0.0-devcluster",
        max_pods: int | None = DEFAULT_MAX_PODS,
    ) -> None:
        self.client = client
        self.name = name
        self.pods_dir = workdir / "pods" / name
        self.labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        self.heartbeat_seconds = heartbeat_seconds
        self.inherit_env = inherit_env
        self.version = version
        self.max_pods = max_pods
        self.online = asyncio.Event()
        self.runners: dict[str, PodRunner] = {}
        self._runner_tasks: set[asyncio.Task[None]] = set()
        self._binding: set[str] = set()
        self._bound: set[str] = set()  # bound by us, not yet seen with our nodeName
        self._waiting: dict[str, JSON] = {}  # pending pods held back by max_pods, by uid
        self._loops: list[asyncio.Task[None]] = []
        self._synced = asyncio.Event()
        self._node_uid = ""

    # ---- public -------------------------------------------------------------------------

    async def start(self) -> None:
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        await self._register()
        self._go_online()
        await asyncio.wait_for(self._synced.wait(), 30)

    async def stop(self) -> None:
        self.online.clear()
        for task in [*self._loops, *self._runner_tasks]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._runner_tasks, return_exceptions=True)
        self._loops.clear()
        for runner in self.runners.values():
            for proc in list(runner.procs.values()):
                proc.kill_group()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5)
        self.runners.clear()
        shutil.rmtree(self.pods_dir, ignore_errors=True)

    def base_env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in self.inherit_env if k in os.environ}
        url = urlparse(self.client.config.server)
        port = str(url.port or 443)
        env |= {
            "KUBERNETES_SERVICE_HOST": url.hostname or HOST_IP,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
        }
        return env

    def find(self, namespace: str, name: str) -> PodRunner | None:
        for runner in self.runners.values():
            if (runner.namespace, runner.name) == (namespace, name):
                return runner
        return None

    async def evict_pod(
        self, namespace: str, name: str, message: str = "The node was low on resource: memory."
    ) -> None:
        """Kill the pod's processes as the kubelet's eviction manager would."""
        runner = self.find(namespace, name)
        if runner is None:
            raise LookupError(f"pod {namespace}/{name} does not run on node {self.name}")
        runner.evict(message)

    def partition(self) -> None:
        """Node loss: stop heartbeats and all API traffic; processes keep running."""
        self.online.clear()
        for task in self._loops:
            task.cancel()
        self._loops.clear()

    async def heal(self) -> None:
        """Reconnect: heartbeat at once, relist pods, resend statuses changed meanwhile."""
        self._synced.clear()
        self._go_online()
        await asyncio.wait_for(self._synced.wait(), 30)
        for runner in list(self.runners.values()):
            if runner.dirty:
                await runner.push()

    # ---- node object and heartbeats ---------------------------------------------------

    def _go_online(self) -> None:
        self.online.set()
        self._loops = [
            asyncio.create_task(self._heartbeat_loop(), name=f"{self.name}-heartbeat"),
            asyncio.create_task(self._watch_loop(), name=f"{self.name}-pods"),
        ]

    def _node_status(self) -> JSON:
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{_memory_ki()}Ki",
            "pods": str(self.max_pods if self.max_pods is not None else DEFAULT_MAX_PODS),
            "ephemeral-storage": "100Gi",
        }
        t = now()
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHas{reason}",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
            for kind, reason in (
                ("MemoryPressure", "SufficientMemory"),
                ("DiskPressure", "NoDiskPressure"),
                ("PIDPressure", "SufficientPID"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "devcluster node agent is posting ready status",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
        )
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": "devcluster",
                "containerRuntimeVersion": "devcluster://local-processes",
                "kubeletVersion": self.version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    async def _register(self) -> None:
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "status": self._node_status(),
        }
        try:
            node = await self.client.create("/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            node = await self.client.patch(
                f"/api/v1/nodes/{self.name}", {"metadata": {"labels": self.labels}}
            )
        self._node_uid = node["metadata"]["uid"]
        await self._beat()

    async def _beat(self) -> None:
        status = self._node_status()
        for cond in status["conditions"]:
            cond.pop("lastTransitionTime")  # the server keeps the previous one
        await self.client.patch(
            f"/api/v1/nodes/{self.name}/status",
            {"status": {"conditions": status["conditions"]}},
            "strategic",
        )
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": _micro_now()}
        try:
            await self.client.patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}
            await self.client.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": self.name,
                        "namespace": LEASE_NS,
                        "ownerReferences": [owner],
                    },
                    "spec": spec,
                },
            )

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self._beat()
            except (ApiError, httpx.HTTPError) as exc:
                log.warning("node %s: heartbeat failed: %s", self.name, exc)
            await asyncio.sleep(self.heartbeat_seconds)

    # ---- pods ---------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        while True:
            try:
                listing = await self.client.get("/api/v1/pods")
                rv = str(listing["metadata"]["resourceVersion"])
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self._on_pod(pod)
                for uid in [u for u in self.runners if u not in seen]:
                    self._on_deleted(uid)
                for uid in [u for u in self._waiting if u not in seen]:
                    del self._waiting[uid]
                self._bind_waiting()
                self._synced.set()
                while True:
                    async for event in self.client.watch("/api/v1/pods", rv):
                        obj: JSON = event["object"]
                        if event["type"] == "ERROR":
                            raise _RelistError(str(obj.get("message", obj)))
                        rv = str(obj["metadata"]["resourceVersion"])
                        if event["type"] == "DELETED":
                            self._on_deleted(obj["metadata"]["uid"])
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self._on_pod(obj)
            except _RelistError as exc:
                log.info("node %s: relisting pods: %s", self.name, exc)
            except (ApiError, httpx.HTTPError, ValueError) as exc:
                log.warning("node %s: pod watch failed: %s", self.name, exc)
                await asyncio.sleep(1.0)

    def _on_pod(self, pod: JSON) -> None:
        uid: str = pod["metadata"]["uid"]
        node = pod["spec"].get("nodeName")
        self._waiting.pop(uid, None)
        if node == self.name:
            self._bound.discard(uid)
            runner = self.runners.get(uid)
            if runner is not None:
                runner.update(pod)
                if (pod.get("status") or {}).get("phase") in _DONE:
                    self._bind_waiting()  # a slot may have freed up
                return
            runner = self.runners[uid] = PodRunner(self, pod)
            self._track(asyncio.create_task(runner.run(), name=f"pod-{uid}"))
        elif not node and uid not in self._binding and self._schedulable(pod):
            if self._full():
                self._waiting[uid] = pod
                return
            self._binding.add(uid)
            self._track(asyncio.create_task(self._bind(pod)))

    def _on_deleted(self, uid: str) -> None:
        self._waiting.pop(uid, None)
        self._bound.discard(uid)
        runner = self.runners.pop(uid, None)
        if runner is not None:
            runner.mark_gone()
            self._bind_waiting()

    def _active_pods(self) -> int:
        """Pods that take a slot: being bound, bound, or running and not finished."""
        running = sum(1 for r in self.runners.values() if r.phase not in _DONE)
        return running + len(self._binding) + len(self._bound)

    def _full(self) -> bool:
        return self.max_pods is not None and self._active_pods() >= self.max_pods

    def _bind_waiting(self) -> None:
        """Bind held-back pending pods, oldest first, while there is room."""
        waiting = sorted(
            self._waiting.values(),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
        )
        for pod in waiting:
            if self._full():
                return
            uid = pod["metadata"]["uid"]
            del self._waiting[uid]
            if uid not in self._binding and self._schedulable(pod):
                self._binding.add(uid)
                self._track(asyncio.create_task(self._bind(pod)))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._runner_tasks.add(task)
        task.add_done_callback(self._runner_tasks.discard)

    def _schedulable(self, pod: JSON) -> bool:
        spec, meta = pod["spec"], pod["metadata"]
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") not in (
            None,
            "Pending",
        ):
            return False
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return False
        selector: dict[str, str] = spec.get("nodeSelector") or {}
        return all(self.labels.get(k) == v for k, v in selector.items())

    async def _bind(self, pod: JSON) -> None:
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        try:
            await self.client.create(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", binding
            )
            if meta["uid"] not in self.runners:
                self._bound.add(meta["uid"])
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning(
                    "node %s: binding %s/%s failed: %s",
                    self.name,
                    meta["namespace"],
                    meta["name"],
                    exc,
                )
        except httpx.HTTPError as exc:
            log.warning("node %s: binding failed: %s", self.name, exc)
        finally:
            self._binding.discard(meta["uid"])
            self._bind_waiting()


class _RelistError(Exception):
    """The watch said its resource version is gone."""
