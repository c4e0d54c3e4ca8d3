"""Shared parts of the operator benchmarks: the whole stack as child processes, plus probes.

``stack()`` starts the local control plane (``devcluster.DevCluster``: etcd, kube-apiserver,
kube-controller-manager, the process-running node agent), a ``redis-server``, installs the CRDs
(``oma_operator.resources.crdgen``), creates a namespace with the store Secret and starts the
operator as
``python -m oma_operator --namespace NS``; on exit (error included) it stops all of it.

API requests are counted without touching the operator: the API server writes an audit log
(``--audit-policy-file``; Metadata level, one line per finished request) and the operator
authenticates with its own client certificate (user ``oma-operator``), the benchmark with
another (``oma-bench``), so ``audit_counts()`` can split requests by client, verb and resource.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

ROOT = Path(__file__).resolve().parent.parent
for _path in ("src", "hack", "operator", "runner_image", ""):
    _full = str(ROOT / _path) if _path else str(ROOT)
    if _full not in sys.path:
        sys.path.insert(0, _full)

from tests.cluster.e2e_env import for_pods  # noqa: E402
from tests.cluster.operator_kit import store_secret  # noqa: E402
from tests.servers.redis_server import RedisServer, redis_binary  # noqa: E402

from devcluster import DevCluster, KubeClient  # noqa: E402
from devcluster.controlplane import ControlPlaneOptions  # noqa: E402
from devcluster.images import OMA_IMAGE  # noqa: E402
from devcluster.kube import ApiError  # noqa: E402
from devcluster.kubeconfig import load_kubeconfig  # noqa: E402
from devcluster.sandbox import sandbox_id  # noqa: E402
from oma_operator.resources.crdgen import approvaldecision_crd, teamrun_crd  # noqa: E402

T = TypeVar("T")
JSON = dict[str, Any]
OPERATOR_USER = "oma-operator"
BENCH_USER = "oma-bench"
TEAMRUNS = "/apis/oma.dev/v1alpha1/namespaces/{ns}/teamruns"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
"""
_TICK = os.sysconf("SC_CLK_TCK")


# ---- printing ----------------------------------------------------------------------------


def _mem_total_gib() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def header(title: str, quick: bool) -> str:
    """Title, machine and the command, for the top of a benchmark's output."""
    return "\n".join(
        [
            f"# {title} ({'quick' if quick else 'full'} run)",
            f"# machine: {os.cpu_count()} cores, {_mem_total_gib():.1f} GiB RAM, "
            f"{platform.machine()}, Linux {platform.release()}, "
            f"Python {platform.python_version()}",
            f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}",
            "# note: shared machine (other test runs may be active); timings are noisy",
        ]
    )


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stats_row(name: str, samples: Sequence[float], unit: str = "s") -> str:
    if not samples:
        return f"| {name} | 0 | - | - | - |"
    return (
        f"| {name} | {len(samples)} | {percentile(samples, 0.5):.3f} {unit} "
        f"| {percentile(samples, 0.99):.3f} {unit} | {max(samples):.3f} {unit} |"
    )


# ---- processes ---------------------------------------------------------------------------


@dataclass
class ProcStats:
    cpu_seconds: float  # user + system
    rss_mib: float
    peak_rss_mib: float  # VmHWM


def proc_stats(pid: int) -> ProcStats | None:
    """CPU seconds and memory of ``pid`` from /proc (``None`` once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return ProcStats(cpu, values.get("VmRSS", 0.0), values.get("VmHWM", 0.0))


def thread_cpu_seconds(native_id: int) -> float:
    """CPU seconds of one thread of this process (e.g. the devcluster thread: the node agent)."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


# ---- the stack ---------------------------------------------------------------------------


@dataclass
class Stack:
    cluster: DevCluster
    redis: RedisServer
    kube: KubeClient  # authenticated as BENCH_USER
    namespace: str
    operator: subprocess.Popen[bytes]
    operator_log: Path
    audit_log: Path
    workdir: Path
    max_pods: int | None

    @property
    def node_agent_thread(self) -> int:
        """Native id of the devcluster thread (its event loop runs the node agent)."""
        for thread in threading.enumerate():
            if thread.name == "devcluster" and thread.native_id is not None:
                return thread.native_id
        return 0

    def control_plane_pids(self) -> dict[str, int]:
        children = self.cluster.running.control_plane.children
        return {child.name: child.pid for child in children}

    def teamruns(self) -> str:
        return TEAMRUNS.format(ns=self.namespace)

    def audit_offset(self) -> int:
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0


# Answers that ask to try again: 429 "storage is (re)initializing" right after a CRD is
# installed or updated, 503 while the API server starts serving a resource.
TRY_AGAIN = (429, 503)


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], limit: float, what: str, interval: float = 0.2
) -> T:
    """``probe()``'s first true value within ``limit`` seconds; an API answer that asks to try
    again (``TRY_AGAIN``) counts as not yet."""
    deadline = time.monotonic() + limit
    while True:
        try:
            value = await probe()
        except ApiError as exc:
            if exc.status not in TRY_AGAIN:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {limit:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def _install_crd(kube: KubeClient, crd: JSON) -> None:
    path = f"{CRDS}/{crd['metadata']['name']}"
    await kube.create(CRDS, crd)

    async def established() -> bool:
        body = await kube.get(path)
        conditions = (body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await wait_for(established, 30, f"CRD {crd['metadata']['name']} to be established")


def _start_operator(
    namespace: str | None, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """The operator, watching ``namespace`` (None: every namespace)."""
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "oma_operator", *scope],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def _stop_operator(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def in_sandbox_or_reexec(wanted: bool) -> bool:
    """With ``wanted``, make sure this process runs inside devcluster's sandbox (a real node
    lives in namespaces of its own): re-exec through ``python -m devcluster sandbox``."""
    if not wanted or sandbox_id() is not None:
        return wanted
    argv = [sys.executable, "-m", "devcluster", "sandbox", "--", sys.executable, *sys.argv]
    path = os.pathsep.join(p for p in (str(ROOT / "hack"), os.environ.get("PYTHONPATH")) if p)
    os.execvpe(sys.executable, argv, {**os.environ, "PYTHONPATH": path})


async def make_namespace(kube: KubeClient, namespace: str, store_url: str) -> None:
    """A namespace whose pods can start (its default ServiceAccount exists), with the Secret
    ``store`` (key ``url``) holding ``store_url``."""
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )

    async def sa_ready() -> bool:
        return await kube.exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")

    await wait_for(sa_ready, 30, f"the default ServiceAccount of namespace {namespace}")
    await store_secret(kube, namespace, store_url)


@contextlib.asynccontextmanager
async def stack(
    workdir: Path,
    *,
    max_pods: int | None = 110,
    real_node: bool = False,
    operator_env: Mapping[str, str] | None = None,
    all_namespaces: bool = False,
) -> AsyncIterator[Stack]:
    """Start everything the operator benchmarks need; stop it all on exit, error or not.
    ``real_node``: runner pods are containers of ``localhost/oma:dev`` under a kubelet (inside
    the sandbox), instead of local processes of the node agent. ``operator_env``: more of the
    operator's settings (e.g. its concurrency limits). ``all_namespaces``: the operator watches
    every namespace (tenants of their own), not only the stack's."""
    venv_bin = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(venv_bin + os.pathsep):
        # The node agent hands its PATH to pods: they must find this virtualenv's oma-runner.
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
    binary = redis_binary()
    if binary is None:
        raise SystemExit("redis-server not found (apt-get install redis-server)")
    policy = workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_log = workdir / "audit.log"
    options = ControlPlaneOptions(
        extra_apiserver_args=(
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        )
    )
    with contextlib.ExitStack() as sync_exit:
        cluster = DevCluster(
            workdir / "cluster", options=options, max_pods=max_pods, real_node=real_node
        ).start()
        sync_exit.callback(cluster.stop)
        redis = RedisServer(binary).start()
        sync_exit.callback(redis.close)
        running = cluster.running.control_plane
        bench_config = running.mint_kubeconfig(BENCH_USER, ("system:masters",))
        operator_config = running.mint_kubeconfig(OPERATOR_USER, ("system:masters",))
        async with KubeClient(load_kubeconfig(bench_config), timeout=60) as kube:
            for crd in (teamrun_crd(), approvaldecision_crd()):
                await _install_crd(kube, crd)
            namespace = f"bench-{uuid.uuid4().hex[:8]}"
            await make_namespace(kube, namespace, for_pods(redis.url))
            operator_log = workdir / "operator.log"
            env = {
                **os.environ,
                "KUBECONFIG": str(operator_config),
                "OMA_RUNNER_IMAGE": OMA_IMAGE if real_node else "oma-runner:bench",
                "OMA_METRICS_PORT": "0",  # no fixed port: other runs may share this machine
                **(operator_env or {}),
            }
            operator = _start_operator(None if all_namespaces else namespace, env, operator_log)
            sync_exit.callback(_stop_operator, operator)
            yield Stack(
                cluster=cluster,
                redis=redis,
                kube=kube,
                namespace=namespace,
                operator=operator,
                operator_log=operator_log,
                audit_log=audit_log,
                workdir=workdir,
                max_pods=max_pods,
            )


# ---- audit log ---------------------------------------------------------------------------


def audit_events(path: Path, offset: int = 0) -> list[JSON]:
    """Finished requests logged by the API server since byte ``offset``."""
    events: list[JSON] = []
    with path.open("rb") as log:
        log.seek(offset)
        for line in log:
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


def request_key(event: JSON) -> str:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event.get("requestURI", "?").split("?")[0]
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return f"{event.get('verb', '?')} {resource}"


def audit_counts(events: Sequence[JSON], user: str) -> Counter[str]:
    """Requests of ``user`` by ``verb resource[/subresource]``."""
    return Counter(request_key(e) for e in events if (e.get("user") or {}).get("username") == user)


def status_codes(events: Sequence[JSON], user: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for event in events:
        if (event.get("user") or {}).get("username") == user:
            code = (event.get("responseStatus") or {}).get("code", 0)
            counts[f"{request_key(event)} -> {code}"] += 1
    return counts


# ---- objects -----------------------------------------------------------------------------


def teamrun(
    name: str,
    script: list[dict[str, Any]],
    *,
    tools: list[str],
    env: dict[str, str] | None = None,
    retry: dict[str, Any] | None = None,
    max_turns: int = 10,
    grace: int = 30,
) -> JSON:
    """A one-agent, one-task TeamRun with a scripted model, stored in the stack's Redis."""
    return {
        "apiVersion": "oma.dev/v1alpha1",
        "kind": "TeamRun",
        "metadata": {"name": name},
        "spec": {
            "runId": f"{name}-{uuid.uuid4().hex[:6]}",
            "team": {
                "agents": [
                    {
                        "name": "clerk",
                        "tools": tools,
                        "maxTurns": max_turns,
                        "model": {"provider": "scripted", "script": script},
                    }
                ]
            },
            "tasks": [{"title": "Work", "description": "Do the work.", "assignee": "clerk"}],
            "store": {
                "redis": {
                    "urlSecretRef": {"name": "store", "key": "url"},
                    "namespace": f"bench-{uuid.uuid4().hex[:8]}",
                }
            },
            "retryPolicy": {"backoffSeconds": 1, **(retry or {})},
            "runner": {
                "terminationGracePeriodSeconds": grace,
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            },
        },
    }


async def get_or_none(kube: KubeClient, path: str) -> JSON | None:
    try:
        return await kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def watch_forever(kube: KubeClient, path: str, on_event: Callable[[str, JSON], None]) -> None:
    """List then watch ``path`` until cancelled (relisting when the watch expires or fails);
    ``on_event(type, object)`` is called for each listed object (as ``ADDED``) and event."""
    while True:
        try:
            listing = await kube.get(path)
            for item in listing["items"]:
                on_event("ADDED", item)
            rv = str(listing["metadata"]["resourceVersion"])
            while True:
                async for event in kube.watch(path, rv, timeout_seconds=120):
                    obj: JSON = event["object"]
                    if event["type"] == "ERROR":
                        raise ValueError(str(obj.get("message", obj)))
                    rv = str(obj["metadata"]["resourceVersion"])
                    if event["type"] != "BOOKMARK":
                        on_event(str(event["type"]), obj)
        except (ApiError, ValueError, OSError, httpx.HTTPError) as exc:
            print(f"# watch {path} restarts: {exc!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.5)
