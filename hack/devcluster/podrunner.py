"""Runs one pod's containers as local processes and reports status like a kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import httpx

from devcluster.kube import JSON, ApiError, KubeClient
from devcluster.podenv import ConfigError, ObjectCache, container_env, expand
from devcluster.podfs import ROOT_ENV, PodFiles
from devcluster.podstatus import Conditions, ContainerState, exit_code, now
from devcluster.procs import ChildProcess

log = logging.getLogger("devcluster.pod")
HOST_IP = "127.0.0.1"
_MAX_MESSAGE = 4096


class PodHost(Protocol):
    """What a runner needs from its node agent."""

    client: KubeClient
    pods_dir: Path
    online: asyncio.Event

    def base_env(self) -> dict[str, str]: ...


class PodRunner:
    """Owns the processes of one pod; ``run()`` is its whole life."""

    def __init__(self, host: PodHost, pod: JSON) -> None:
        self.host = host
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.files = PodFiles(host.pods_dir / self.uid)
        spec = pod["spec"]
        self.containers = {
            c["name"]: ContainerState(c["name"], c.get("image", "")) for c in spec["containers"]
        }
        self.inits = {
            c["name"]: ContainerState(c["name"], c.get("image", ""))
            for c in spec.get("initContainers") or []
        }
        self.conditions = Conditions()
        self.phase, self.reason, self.message = "Pending", "", ""
        self.start_time = now()
        self.procs: dict[str, ChildProcess] = {}
        self.envs: dict[str, dict[str, str]] = {}
        self.interrupt = asyncio.Event()
        self.gone = False
        self.evicted: str | None = None
        self.dirty = False
        self.update(pod)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    @property
    def deleting(self) -> bool:
        return self.gone or bool(self.pod["metadata"].get("deletionTimestamp"))

    def update(self, pod: JSON) -> None:
        self.pod = pod
        if self.deleting:
            self.interrupt.set()

    def mark_gone(self) -> None:
        """The object left the API (force delete): kill everything now."""
        self.gone = True
        self.interrupt.set()

    def evict(self, message: str) -> None:
        """Kubelet-side eviction: kill the processes, end ``Failed``/``Evicted``."""
        self.evicted = message
        self.interrupt.set()

    # ---- life cycle -------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._life()
        except asyncio.CancelledError:
            self._kill_all()
            raise
        except Exception:
            log.exception("pod %s/%s: node agent error", self.namespace, self.name)
            self._kill_all()

    async def _life(self) -> None:
        status = self.pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            await self._idle_until_deleted()  # finished under an earlier agent
            return
        self.conditions.set("PodReadyToStartContainers", False)
        self.conditions.set("PodScheduled", True)
        self.conditions.set("Initialized", not self.inits)
        self._not_ready("ContainersNotReady")
        await self.push()
        if not await self._retry(self._prepare):
            return await self._stopped()
        self.conditions.set("PodReadyToStartContainers", True)
        for name in self.inits:
            if not await self._run_init(name):
                return await self._stopped()
        self.conditions.set("Initialized", True)
        if not await self._retry(self._start_all):
            return await self._stopped()
        await self._supervise()

    async def _retry(self, step: Callable[[], Awaitable[None]]) -> bool:
        """Run ``step`` until it works; ``False`` if interrupted first."""
        while not self.interrupt.is_set():
            try:
                await step()
                return True
            except (ConfigError, ApiError, httpx.HTTPError) as exc:
                for c in [*self.inits.values(), *self.containers.values()]:
                    c.waiting("CreateContainerConfigError", str(exc))
                await self.push()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.interrupt.wait(), 2.0)
        return False

    async def _prepare(self) -> None:
        objects = ObjectCache(self.host.client, self.namespace)
        await self.files.materialize(self.pod, self.host.client, objects)
        base = self.host.base_env() | {"HOSTNAME": self.name, ROOT_ENV: str(self.files.root)}
        spec = self.pod["spec"]
        for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
            self.envs[c["name"]] = await container_env(self.pod, c, objects, base)
            self.files.mount(c)

    def _spec(self, name: str) -> JSON:
        spec = self.pod["spec"]
        return next(
            c
            for c in [*(spec.get("initContainers") or []), *spec["containers"]]
            if c["name"] == name
        )

    async def _spawn(self, name: str, state: ContainerState) -> None:
        c = self._spec(name)
        env = self.envs[name]
        argv = [expand(a, env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
        self.files.termination_file(c)
        cwd = self.files.host_path(c["workingDir"]) if c.get("workingDir") else self.files.root
        cwd.mkdir(parents=True, exist_ok=True)
        if not c.get("command"):
            state.terminated(
                128, "devcluster runs no images: the container needs a command", "StartError"
            )
            return
        try:
            proc = await ChildProcess.spawn(
                f"{self.name}/{name}", argv, self.files.log_path(name), env=env, cwd=cwd
            )
        except OSError as exc:
            state.terminated(128, f"cannot start {argv[0]!r}: {exc}", "StartError")
            return
        self.procs[name] = proc
        state.running(proc.pid)

    def _record_exit(
        self, name: str, state: ContainerState, code: int, reason: str | None = None
    ) -> None:
        self.procs.pop(name, None)
        c = self._spec(name)
        path = self.files.host_path(c.get("terminationMessagePath") or "/dev/termination-log")
        try:
            message = path.read_bytes()[:_MAX_MESSAGE].decode(errors="replace")
        except OSError:
            message = ""
        if (
            not message
            and code != 0
            and c.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            with contextlib.suppress(OSError):
                lines = self.files.log_path(name).read_text(errors="replace").splitlines()[-80:]
                message = "\n".join(lines)[-2048:]
        state.terminated(code, message, reason)

    async def _run_init(self, name: str) -> bool:
        state = self.inits[name]
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while True:
            await self._spawn(name, state)
            await self.push()
            proc = self.procs.get(name)
            if proc is not None:
                code = await self._wait_or_interrupt(proc)
                if code is None:
                    return False
                self._record_exit(name, state, code)
            if state.exit_code == 0:
                return True
            if policy == "Never" or self.interrupt.is_set():
                self.phase = "Failed"
                return False
            state.restarting()
            await self._backoff(state.restart_count)

    async def _wait_or_interrupt(self, proc: ChildProcess) -> int | None:
        waiter = asyncio.ensure_future(proc.wait())
        stop = asyncio.ensure_future(self.interrupt.wait())
        try:
            await asyncio.wait([waiter, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when cancelled (agent stopping): leave no task pending behind
            stop.cancel()
            if not waiter.done():
                waiter.cancel()
        if waiter.done() and not waiter.cancelled():
            return exit_code(waiter.result())
        return None

    async def _start_all(self) -> None:
        for name, state in self.containers.items():
            await self._spawn(name, state)
        self._refresh_phase()
        await self.push()

    async def _supervise(self) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while True:
            if self.interrupt.is_set() or not self.procs:
                return await self._stopped()
            waiters = {asyncio.ensure_future(p.wait()): n for n, p in self.procs.items()}
            stop = asyncio.ensure_future(self.interrupt.wait())
            try:
                done, _ = await asyncio.wait([*waiters, stop], return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when cancelled (agent stopping): leave no task pending behind
                for fut in [stop, *waiters]:
                    if not fut.done():
                        fut.cancel()
            for fut, name in waiters.items():
                if fut in done:
                    self._record_exit(name, self.containers[name], exit_code(fut.result()))
            if self.interrupt.is_set():
                continue
            for name, state in self.containers.items():
                code = state.exit_code
                if code is not None and (
                    policy == "Always" or (policy == "OnFailure" and code != 0)
                ):
                    state.restarting()
                    state.waiting(
                        "CrashLoopBackOff", f"back-off restarting failed container {name}"
                    )
                    await self.push()
                    await self._backoff(state.restart_count)
                    if self.interrupt.is_set():
                        break
                    await self._spawn(name, state)
            self._refresh_phase()
            await self.push()

    async def _backoff(self, restarts: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.interrupt.wait(), min(10.0, 0.5 * 2 ** min(restarts, 5)))

    def _refresh_phase(self) -> None:
        states = list(self.containers.values())
        if all(s.is_running for s in states):
            self.phase = "Running"
            self.conditions.set("ContainersReady", True)
            self.conditions.set("Ready", True)
        else:
            if any(s.is_running for s in states) or any(s.restart_count for s in states):
                self.phase = "Running"
            self._not_ready("ContainersNotReady")

    def _not_ready(self, reason: str) -> None:
        self.conditions.set("ContainersReady", False, reason)
        self.conditions.set("Ready", False, reason)

    async def _stopped(self) -> None:
        """Stop what still runs (deletion or eviction), settle the phase, then clean up."""
        if self.evicted is not None:
            for name, proc in list(self.procs.items()):
                proc.kill_group()
                self._record_exit(name, self.containers[name], exit_code(await proc.wait()))
            self.phase, self.reason, self.message = "Failed", "Evicted", self.evicted
            self.conditions.set("DisruptionTarget", True, "TerminationByKubelet", self.evicted)
        else:
            if self.procs:
                await self._terminate()
            ok = all(s.exit_code == 0 for s in self.containers.values())
            self.phase = "Succeeded" if ok and self.phase != "Failed" else "Failed"
        self._not_ready("PodCompleted")
        await self.push()
        await self._idle_until_deleted()

    async def _terminate(self) -> None:
        """SIGTERM, wait the grace period, SIGKILL: all containers at once."""
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        grace = spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace
        if self.gone:
            grace = 0
        names = list(self.procs)
        codes = await asyncio.gather(*(self.procs[n].stop(float(grace)) for n in names))
        for name, code in zip(names, codes, strict=True):
            self._record_exit(name, self.containers[name], exit_code(code))

    async def _idle_until_deleted(self) -> None:
        while not self.deleting:
            self.interrupt.clear()
            await self.interrupt.wait()
        self._kill_all()
        await self._delete()

    async def _delete(self) -> None:
        """Remove the object (grace 0); finalizers, if any, keep it until others drop them."""
        if self.procs:
            await self._terminate()
        if not self.gone and self.host.online.is_set():
            body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
            try:
                await self.host.client.delete(self.path, body)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
        self.files.remove()

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill_group()

    # ---- status -----------------------------------------------------------------------

    def status(self) -> JSON:
        return {
            "phase": self.phase,
            "reason": self.reason or None,
            "message": self.message or None,
            "conditions": self.conditions.render(),
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "podIP": HOST_IP,
            "podIPs": [{"ip": HOST_IP}],
            "startTime": self.start_time,
            "containerStatuses": [s.status() for s in self.containers.values()],
            "initContainerStatuses": [s.status() for s in self.inits.values()],
        }

    async def push(self) -> None:
        """Send the status (strategic merge); while the node is cut off, only remember it."""
        if self.gone:
            return
        if not self.host.online.is_set():
            self.dirty = True
            return
        self.dirty = False
        try:
            await self.host.client.patch(
                f"{self.path}/status", {"status": self.status()}, "strategic"
            )
        except ApiError as exc:
            if exc.status == 404:
                self.mark_gone()
            else:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)
