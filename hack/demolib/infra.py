"""What the demo stands on: the chart installed in a namespace, the operator, a Redis store and a
reviewer. Every server is a child process of the demo (own process group, killed with it)."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from demolib.views import DemoError, MissingTool, say, shown, wait_until
from devcluster.binaries import find_tool
from devcluster.images import OMA_IMAGE
from devcluster.kube import KubeClient
from devcluster.procs import ChildProcess

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "oma"
RELEASE = "oma"
REVIEWER = "alice"


@dataclass
class Tools:
    kubectl: str
    helm: str
    redis_server: str

    @classmethod
    def find(cls) -> Tools:
        found = {name: find_tool(name) for name in ("kubectl", "helm")}
        redis = shutil.which("redis-server")
        missing = [name for name, path in found.items() if path is None]
        if redis is None:
            missing.append("redis-server (Debian package redis-server)")
        if missing:
            raise MissingTool(
                f"missing {', '.join(missing)}: run hack/k8s/ensure-binaries (kubectl, helm) "
                "or install it"
            )
        return cls(str(found["kubectl"]), str(found["helm"]), str(redis))


async def run_tool(
    argv: list[str], env: dict[str, str], *, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a client tool to completion in a thread (the event loop keeps serving the cluster)."""

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
        )

    done = await asyncio.to_thread(run)
    if check and done.returncode != 0:
        raise DemoError(f"{shown(argv)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


async def install_chart(
    kube: KubeClient, tools: Tools, namespace: str, env: dict[str, str], image: str | None
) -> None:
    # Restricted pod security: the runner pods the operator builds must be admitted under it.
    await kube.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            },
        },
    )
    argv = [tools.helm, "install", RELEASE, str(CHART), "-n", namespace, "--wait=false"]
    if image is None:
        # replicas=0: the node agent runs commands, not images, so the operator runs below as
        # a local process with the chart's service account (its RBAC, nothing more).
        argv += ["--set", "operator.replicas=0"]
    else:  # a real node: the operator is the chart's Deployment, from the image built here
        repository, tag = image.rsplit(":", 1)
        argv += ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]
    say(f"$ {shown(argv).replace(str(REPO) + '/', '')}")
    done = await run_tool(argv, env)
    status = next((line for line in done.stdout.splitlines() if line.startswith("STATUS")), "")
    what = "CRDs, RBAC, reviewer policy, runner service account"
    say(f"  {status or 'installed'}: {what}" + ("" if image is None else ", operator Deployment"))


async def operator_kubeconfig(kube: KubeClient, admin: Path, namespace: str, target: Path) -> Path:
    """A kubeconfig holding a token of the chart's operator service account."""
    account = f"{RELEASE}-operator"
    token = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return _token_kubeconfig(admin, account, token["status"]["token"], namespace, target)


def _token_kubeconfig(admin: Path, user: str, token: str, namespace: str, target: Path) -> Path:
    cluster = yaml.safe_load(admin.read_text())["clusters"][0]
    context = {"cluster": cluster["name"], "user": user, "namespace": namespace}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": user,
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": context}],
    }
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


async def start_operator(kubeconfig: Path, namespace: str, workdir: Path) -> ChildProcess:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "OMA_RUNNER_SERVICE_ACCOUNT": f"{RELEASE}-runner",
    }
    argv = [_venv_tool("oma-operator"), "--namespace", namespace]
    say(f"$ KUBECONFIG=<{RELEASE}-operator token> {shown(argv)}")
    return await ChildProcess.spawn("operator", argv, workdir / "logs" / "operator.log", env=env)


@dataclass
class Redis:
    process: ChildProcess
    url: str  # as the demo reaches it
    pod_host: str | None = None

    @property
    def url_for_pods(self) -> str:
        return self.url.replace("@127.0.0.1:", f"@{self.pod_host}:") if self.pod_host else self.url


async def start_redis(binary: str, workdir: Path, pod_host: str | None = None) -> Redis:
    """``redis-server`` on a free loopback port, password required, no persistence; with
    ``pod_host`` (the sandbox's address) also there, for pods on a real node."""
    password = secrets.token_urlsafe(12)
    binds = ["127.0.0.1", *([pod_host] if pod_host else [])]
    for _ in range(5):  # a probed port can be taken before the server binds it
        port = _free_port()
        argv = [binary, "--port", str(port), "--bind", *binds, "--save", ""]
        argv += ["--appendonly", "no", "--daemonize", "no", "--requirepass", password]
        argv += ["--dir", str(workdir)]
        process = await ChildProcess.spawn("redis", argv, workdir / "logs" / "redis.log")
        if await _redis_answers(port, password, process):
            where = " and ".join(f"{address}:{port}" for address in binds)
            say(f"redis-server on {where} (child process, pid {process.pid})")
            return Redis(process, f"redis://:{password}@127.0.0.1:{port}/0", pod_host)
        await process.stop(grace=2)
    raise DemoError(f"redis-server did not start: {process.tail(5)}")


async def _redis_answers(port: int, password: str, process: ChildProcess) -> bool:
    async def pong() -> bool:
        if process.returncode is not None:
            raise DemoError(f"redis-server exited: {process.tail(5)}")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        try:
            writer.write(f"AUTH {password}\r\nPING\r\n".encode())
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(100), 2)
            return b"+OK" in reply
        finally:
            writer.close()

    try:
        await wait_until(pong, 15, "redis-server to answer")
    except DemoError:
        if process.returncode is not None:
            return False  # e.g. the port was taken: try another
        raise
    return True


async def store_secret(kube: KubeClient, namespace: str, url: str) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "oma-store"},
            "data": {"url": base64.b64encode(url.encode()).decode()},
        },
    )


async def grant_reviewer(kube: KubeClient, namespace: str, user: str) -> None:
    """RBAC: ``user`` may read and decide ApprovalDecisions in the namespace, nothing else."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "oma-reviewers"},
        "rules": [
            {
                "apiGroups": ["oma.dev"],
                "resources": ["approvaldecisions"],
                "verbs": ["get", "list", "watch", "patch"],
            },
            {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["get", "list"]},
        ],
    }
    await kube.create(f"{rbac}/roles", role)
    await kube.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "oma-reviewers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "oma-reviewers",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def ensure_image() -> None:
    """The image the real node runs (operator and runner pods): built by hack/build-image if
    podman does not have it yet (minutes the first time, then cached)."""
    if shutil.which("podman") is None:
        raise MissingTool("podman (Debian package podman), or run with --node-agent")
    podman = ["podman", "--storage-driver", "vfs", "image", "exists", OMA_IMAGE]
    if subprocess.run(podman, check=False).returncode == 0:
        return
    say(f"building {OMA_IMAGE} with hack/build-image (once; cached afterwards)")
    if subprocess.run([str(REPO / "hack" / "build-image")], check=False).returncode != 0:
        raise DemoError("hack/build-image failed (its output is above)")


def _venv_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingTool(f"{name} is not on PATH: pip install -e . in the venv first")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


OPERATOR_PODS = "app.kubernetes.io/component=operator"
# A pod in one of these states will not get better by waiting.
STUCK = {"CrashLoopBackOff", "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull",
         "CreateContainerConfigError", "CreateContainerError"}  # fmt: skip


@dataclass
class LocalOperator:
    """``oma-operator`` as a child process of the demo (on the node agent)."""

    process: ChildProcess

    async def check(self) -> None:
        if self.process.returncode is not None:
            raise DemoError(f"the operator exited ({self.process.returncode})")

    async def tail(self, lines: int) -> str:
        return self.process.tail(lines)


@dataclass
class InClusterOperator:
    """The chart's operator Deployment, its pod on the real node."""

    kube: KubeClient
    tools: Tools
    env: dict[str, str]
    namespace: str

    async def pod(self) -> dict[str, Any] | None:
        listed = await self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=OPERATOR_PODS
        )
        live = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None

    async def check(self) -> None:
        pod = await self.pod()
        for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK:
                reason, message = waiting["reason"], waiting.get("message")
                raise DemoError(f"the operator pod is {reason}: {message}")

    async def ready(self) -> str:
        async def running() -> str | None:
            await self.check()
            pod = await self.pod()
            if pod is None:
                return None
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
            return pod["metadata"]["name"] if conditions.get("Ready") == "True" else None

        return await wait_until(running, 120, "the operator pod to be Ready")

    async def tail(self, lines: int) -> str:
        argv = [self.tools.kubectl, "-n", self.namespace, "logs", "-l", OPERATOR_PODS]
        done = await run_tool([*argv, f"--tail={lines}"], self.env, check=False)
        return done.stdout or done.stderr


Operator = LocalOperator | InClusterOperator
