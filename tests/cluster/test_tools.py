"""kubectl and helm (built by hack/k8s/ensure-binaries) against the cluster."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from devcluster import KubeClient
from tests.cluster.conftest import ClusterHandle

pytestmark = pytest.mark.cluster


async def run(*argv: str, env: dict[str, str] | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"{argv} failed: {err.decode()}"
    return out.decode()


async def test_kubectl_lists_ready_node(cluster: ClusterHandle) -> None:
    kubectl = cluster.tool("kubectl")
    out = await run(kubectl, f"--kubeconfig={cluster.kubeconfig}", "get", "nodes", "-o", "json")
    nodes = json.loads(out)["items"]
    assert nodes
    ready = [c["status"] for n in nodes for c in n["status"]["conditions"] if c["type"] == "Ready"]
    assert "True" in ready


async def test_helm_installs_chart(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    helm = cluster.tool("helm")
    chart = tmp_path / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    common = [f"--kubeconfig={cluster.kubeconfig}", f"--namespace={namespace}"]
    env = os.environ | {
        f"HELM_{kind}_HOME": str(tmp_path / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")
    }
    await run(helm, "install", "rel", str(chart), "--set", "greeting=hi", *common, env=env)
    cm = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps/rel-cfg")
    assert cm["data"] == {"greeting": "hi"}
    listed = json.loads(await run(helm, "list", "-o", "json", *common, env=env))
    assert [r["name"] for r in listed] == ["rel"]
    await run(helm, "uninstall", "rel", *common, env=env)
