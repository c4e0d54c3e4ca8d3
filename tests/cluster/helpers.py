"""Small helpers shared by the cluster tests (they work against any cluster)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devcluster.kube import JSON, ApiError, KubeClient

T = TypeVar("T")
IMAGE = "busybox:1.36"  # ignored by the devcluster node agent; used by real kubelets


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], limit: float, what: str, interval: float = 0.2
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``limit``s."""
    deadline = time.monotonic() + limit
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def evict(kube: KubeClient, namespace: str, pod: str) -> None:
    """Evict ``pod`` through the Eviction API (what ``kubectl drain`` does)."""
    await kube.create(
        f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        },
    )


def pod(name: str, script: str, **spec: Any) -> JSON:
    """A one-container pod running ``sh -c script``; ``spec`` entries override the pod spec."""
    container: JSON = {"name": "main", "image": IMAGE, "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [container],
            **spec,
        },
    }


async def get_or_none(kube: KubeClient, path: str) -> JSON | None:
    try:
        return await kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def wait_phase(kube: KubeClient, path: str, phases: set[str], limit: float = 60) -> JSON:
    async def probe() -> JSON | None:
        obj = await kube.get(path)
        return obj if obj.get("status", {}).get("phase") in phases else None

    return await wait_for(probe, limit, f"{path} to reach phase {sorted(phases)}")


async def wait_gone(kube: KubeClient, path: str, limit: float = 60) -> None:
    async def probe() -> bool:
        return await get_or_none(kube, path) is None

    await wait_for(probe, limit, f"{path} to disappear")


def tool_package(
    root: Path, module: str, source: str, entry_points: dict[str, str], dist: str = "oma-test-tools"
) -> Path:
    """Write ``root`` as an installed distribution offering tools through the ``oma.tools``
    entry-point group: ``module``.py holding ``source``, and a ``*.dist-info`` with METADATA and
    ``entry_points.txt`` (``name = module:attribute`` per entry). Put ``root`` on a runner's
    PYTHONPATH and ``importlib.metadata`` finds it as it finds any installed package."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[oma.tools]\n{lines}")
    return root


def with_pythonpath(root: Path, env: dict[str, str] | None = None) -> str:
    """A PYTHONPATH value with ``root`` first, keeping what ``env`` (default: ours) had."""
    current = (os.environ if env is None else env).get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(root), current) if p)


def tables(text: str) -> list[list[list[str]]]:
    """``kubectl get`` output as tables (one per kind, blank-line separated), each a header row
    and value rows. Cells are cut at the header's column positions (kubectl aligns every row to
    them), so an empty cell reads ``""``."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    parsed: list[list[list[str]]] = []
    for block in filter(None, blocks):
        starts = [m.start() for m in re.finditer(r"\S+", block[0])]
        bounds = list(zip(starts, [*starts[1:], None], strict=True))
        parsed.append([[line[a:b].strip() for a, b in bounds] for line in block])
    return parsed


async def run_tool(*argv: str) -> str:
    """Run a client tool (kubectl, helm); its stdout, or an assertion error with its stderr."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}): {err.decode()}"
    return out.decode()


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """Each test case's outcome (passed, skipped, failed) and message, from a JUnit XML file
    (what a child pytest wrote)."""
    from xml.etree import ElementTree

    found: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome = "skipped" if child.tag == "skipped" else "failed"
                message = child.get("message", "") + (child.text or "")
        found[case.get("name", "")] = (outcome, message)
    return found


async def event_counts(kube: KubeClient, namespace: str, name: str) -> dict[str, int]:
    """How many times each reason was posted about the TeamRun (timestamps have 1 s steps,
    so order within a second is not known)."""
    events = await kube.get(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}"
    )
    counts: dict[str, int] = {}
    for event in events["items"]:
        if event["involvedObject"].get("kind") == "TeamRun":
            counts[event["reason"]] = counts.get(event["reason"], 0) + (event.get("count") or 1)
    return counts


RUNNER_PODS = "oma.dev/teamrun"  # a label selector: the operator's runner pods, no others


async def runner_pods(kube: KubeClient, namespace: str) -> list[JSON]:
    """The runner pods in ``namespace`` (not, e.g., the operator's own pod beside them)."""
    listed = await kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=RUNNER_PODS)
    items: list[JSON] = listed["items"]
    return items


async def create_namespace(kube: KubeClient) -> str:
    """A fresh namespace, once its ``default`` ServiceAccount exists (pods need it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.create("/api/v1/namespaces", body)

    async def sa_ready() -> bool:
        return await kube.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default")

    await wait_for(sa_ready, 30, "the namespace's default ServiceAccount")
    return name


async def delete_namespace(kube: KubeClient, name: str) -> None:
    """Delete ``name``; one already deleted (or being deleted) is fine."""
    try:
        await kube.delete(f"/api/v1/namespaces/{name}")
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise


EXEC_PLUGIN = """#!{python}
# An exec credential plugin (as EKS, GKE and AKS kubeconfigs use one): prints the credentials
# as an ExecCredential and counts its runs.
import json, pathlib
ran = pathlib.Path({ran!r})
ran.write_text(str(int(ran.read_text() or 0) + 1) if ran.exists() else "1")
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {status},
}}))
"""
# The same for a user whose credentials an exec plugin prints already (a managed cluster's, with
# E2E_CLUSTER=existing): that plugin runs and its answer is passed on.
EXEC_RELAY = """#!{python}
import os, pathlib, subprocess, sys
ran = pathlib.Path({ran!r})
ran.write_text(str(int(ran.read_text() or 0) + 1) if ran.exists() else "1")
env = {{**os.environ, **{env!r}}}
answer = subprocess.run({argv!r}, env=env, stdout=subprocess.PIPE, text=True, check=True)
sys.stdout.write(answer.stdout)
"""


def exec_kubeconfig(source: Path, folder: Path) -> tuple[str, Path]:
    """``source``'s cluster and user as kubectl users on managed clusters have them: two files
    (clusters and users; contexts, the current one in the second file) and a user whose
    credentials an exec plugin prints. Returns the ``$KUBECONFIG`` value (both files) and the
    file the plugin counts its runs in."""
    import base64
    import sys

    import yaml

    config = yaml.safe_load(source.read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == current["context"]["cluster"])
    user = next(u for u in config["users"] if u["name"] == current["context"]["user"])["user"]

    def material(field: str) -> str:
        inline = user.get(f"{field}-data")
        return base64.b64decode(inline).decode() if inline else Path(user[field]).read_text()

    folder.mkdir(parents=True, exist_ok=True)
    ran, plugin = folder / "plugin-runs", folder / "credential-plugin"
    api_version = "client.authentication.k8s.io/v1"
    if "exec" in user:
        own = user["exec"]
        api_version = own.get("apiVersion", api_version)
        env = {e["name"]: e["value"] for e in own.get("env") or []}
        argv = [own["command"], *(own.get("args") or [])]
        plugin.write_text(
            EXEC_RELAY.format(python=sys.executable, ran=str(ran), env=env, argv=argv)
        )
    else:
        if "token" in user or "tokenFile" in user:
            token = user.get("token") or Path(user["tokenFile"]).read_text().strip()
            status: dict[str, str] = {"token": token}
        else:
            status = {
                "clientCertificateData": material("client-certificate"),
                "clientKeyData": material("client-key"),
            }
        plugin.write_text(EXEC_PLUGIN.format(python=sys.executable, ran=str(ran), status=status))
    plugin.chmod(0o700)
    users = folder / "clusters-and-users.kubeconfig"
    # kubectl requires interactiveMode with the v1 API (managed clusters' kubeconfigs set it).
    exec_user = {
        "exec": {"apiVersion": api_version, "command": str(plugin), "interactiveMode": "Never"}
    }
    users.write_text(
        yaml.safe_dump(
            {"clusters": [cluster], "users": [{"name": "via-plugin", "user": exec_user}]}
        )
    )
    contexts = folder / "contexts.kubeconfig"
    context = {"cluster": cluster["name"], "user": "via-plugin"}
    contexts.write_text(
        yaml.safe_dump(
            {"current-context": "plugin", "contexts": [{"name": "plugin", "context": context}]}
        )
    )
    return f"{users}{os.pathsep}{contexts}", ran


def oma_command() -> str:
    beside = Path(sys.executable).with_name("oma")
    found = str(beside) if beside.exists() else shutil.which("oma")
    if found is None:
        message = "the oma console script is not installed (pip install -e .)"
        if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":  # CI installs it: missing is a failure
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [oma_command(), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


async def oma(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``oma`` command line as a subprocess, as ``kubeconfig``'s user."""
    return await asyncio.to_thread(_run, kubeconfig, *args)
