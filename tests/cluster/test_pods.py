"""Pods run by whatever kubelet the cluster has (the devcluster node agent by default).

Scripts write container paths as ``${DEVCLUSTER_POD_ROOT:-}/path``: under the node agent
every container path lives below that per-pod root; on a real kubelet the variable is unset.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path

import pytest

from devcluster import ApiError, KubeClient
from devcluster.kube import JSON
from tests.cluster.conftest import ClusterHandle
from tests.cluster.helpers import evict, pod, run_tool, wait_for, wait_gone, wait_phase

pytestmark = pytest.mark.cluster
ROOT = "${DEVCLUSTER_POD_ROOT:-}"


def terminated(obj: JSON, container: str = "main") -> JSON | None:
    for status in obj.get("status", {}).get("containerStatuses") or []:
        if status["name"] == container:
            term: JSON | None = (status.get("state") or {}).get("terminated")
            return term
    return None


async def test_failed_command_reports_exit_code_and_termination_message(
    kube: KubeClient, namespace: str
) -> None:
    script = f'echo "boom: config missing" > {ROOT}/work/why; exit 3'
    manifest = pod("fails", script, container={"terminationMessagePath": "/work/why"})
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    obj = await wait_phase(kube, f"/api/v1/namespaces/{namespace}/pods/fails", {"Failed"})
    term = terminated(obj)
    assert term is not None
    assert term["exitCode"] == 3
    assert term["reason"] == "Error"
    assert term["message"].strip() == "boom: config missing"
    assert "finishedAt" in term


async def test_successful_pod_sees_env_and_volumes(kube: KubeClient, namespace: str) -> None:
    ns_path = f"/api/v1/namespaces/{namespace}"
    await kube.create(
        f"{ns_path}/secrets",
        {
            "metadata": {"name": "creds"},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        },
    )
    await kube.create(
        f"{ns_path}/configmaps",
        {"metadata": {"name": "settings"}, "data": {"mode": "fast", "limit": "7"}},
    )
    script = (
        f"msg={ROOT}/dev/termination-log; "
        'echo "plain=$PLAIN secret=$TOKEN mode=$MODE pod=$POD_NAME ns=$POD_NS" > $msg; '
        'echo "uid=${POD_UID:+yes} from=$CFG_limit expanded=$EXPANDED" >> $msg; '
        f'echo "file=$(cat {ROOT}/etc/settings/mode)" >> $msg'
    )
    env = [
        {"name": "PLAIN", "value": "hello"},
        {"name": "EXPANDED", "value": "$(PLAIN)-world"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    manifest = pod(
        "envs",
        script,
        container={
            "env": env,
            "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
            "volumeMounts": [{"name": "settings", "mountPath": "/etc/settings"}],
        },
        volumes=[{"name": "settings", "configMap": {"name": "settings"}}],
    )
    await kube.create(f"{ns_path}/pods", manifest)
    obj = await wait_phase(kube, f"{ns_path}/pods/envs", {"Succeeded", "Failed"})
    term = terminated(obj)
    assert term is not None
    assert term["exitCode"] == 0, term
    assert term["reason"] == "Completed"
    assert term["message"].splitlines() == [
        f"plain=hello secret=s3cret mode=fast pod=envs ns={namespace}",
        "uid=yes from=7 expanded=hello-world",
        "file=fast",
    ]
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["PodScheduled"]["status"] == "True"
    assert conds["Initialized"]["status"] == "True"
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"].get("reason") == "PodCompleted"


async def _watch_until_deleted(kube: KubeClient, namespace: str, name: str, rv: str) -> list[JSON]:
    """Every version of the pod after resourceVersion ``rv`` until it is DELETED."""
    seen: list[JSON] = []
    while True:
        async for event in kube.watch(
            f"/api/v1/namespaces/{namespace}/pods",
            rv,
            fieldSelector=f"metadata.name={name}",
        ):
            if event["type"] == "BOOKMARK":
                continue
            seen.append(event["object"])
            rv = event["object"]["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                return seen


@pytest.mark.timeout(180)
async def test_eviction_api_sends_sigterm_then_pod_disappears(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    script = (
        f"trap 'echo got SIGTERM > {ROOT}/markers/sigterm; "
        f"echo terminated by SIGTERM > {ROOT}/dev/termination-log; exit 0' TERM; "
        f"touch {ROOT}/markers/trapped; echo started; while true; do sleep 0.1; done"
    )
    manifest = pod(
        "victim",
        script,
        container={"volumeMounts": [{"name": "markers", "mountPath": "/markers"}]},
        volumes=[
            {"name": "markers", "hostPath": {"path": str(marker_dir), "type": "DirectoryOrCreate"}}
        ],
        terminationGracePeriodSeconds=20,
    )
    path = f"/api/v1/namespaces/{namespace}/pods/victim"
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    await wait_phase(kube, path, {"Running"})

    async def trapped() -> bool:
        """The shell has installed its trap: it says so right after."""
        if cluster.local is not None:  # the hostPath is this machine's directory
            return (marker_dir / "trapped").exists()
        kubectl = [cluster.tool("kubectl"), f"--kubeconfig={cluster.kubeconfig}"]
        return "started" in await run_tool(*kubectl, "-n", namespace, "logs", "victim")

    await wait_for(trapped, 30, "the shell to install its SIGTERM trap")
    # The watch starts from this listing: it sees every change the eviction makes, however
    # late its request reaches the API server.
    listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    rv = listing["metadata"]["resourceVersion"]
    watcher = asyncio.create_task(_watch_until_deleted(kube, namespace, "victim", rv))
    await evict(kube, namespace, "victim")
    history = await asyncio.wait_for(watcher, 60)
    await wait_gone(kube, path)
    messages = [t.get("message", "") for t in map(terminated, history) if t]
    assert any("terminated by SIGTERM" in m for m in messages), history[-1]
    disruption = [
        c
        for obj in history
        for c in obj.get("status", {}).get("conditions") or []
        if c["type"] == "DisruptionTarget"
    ]
    assert disruption and disruption[-1]["reason"] == "EvictionByEvictionAPI"
    if cluster.local is not None:  # the hostPath is this machine's directory
        assert (marker_dir / "sigterm").read_text().strip() == "got SIGTERM"


async def test_deleting_owner_garbage_collects_pod(kube: KubeClient, namespace: str) -> None:
    ns_path = f"/api/v1/namespaces/{namespace}"
    owner = await kube.create(f"{ns_path}/configmaps", {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    manifest = pod(
        "owned",
        "while true; do sleep 0.2; done",
        metadata={"ownerReferences": [ref]},
        terminationGracePeriodSeconds=2,
    )
    await kube.create(f"{ns_path}/pods", manifest)
    await wait_phase(kube, f"{ns_path}/pods/owned", {"Running"})
    await kube.delete(f"{ns_path}/configmaps/owner", {"propagationPolicy": "Background"})
    await wait_gone(kube, f"{ns_path}/pods/owned", limit=60)


async def test_finalizer_keeps_terminated_pod_until_removed(
    kube: KubeClient, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/held"
    manifest = pod(
        "held",
        "while true; do sleep 0.2; done",
        metadata={"finalizers": ["test.oma.dev/hold"]},
        terminationGracePeriodSeconds=2,
    )
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    await wait_phase(kube, path, {"Running"})
    await kube.delete(path)

    async def stopped() -> JSON | None:
        obj = await kube.get(path)
        statuses = obj["status"].get("containerStatuses") or []
        done = statuses and all("terminated" in (s.get("state") or {}) for s in statuses)
        return obj if done and obj["metadata"].get("deletionGracePeriodSeconds") == 0 else None

    obj = await wait_for(stopped, 60, "the kubelet to stop the containers and release the pod")
    assert obj["metadata"]["finalizers"] == ["test.oma.dev/hold"]
    await kube.patch(path, {"metadata": {"finalizers": None}})
    await wait_gone(kube, path)


async def test_restart_policy_on_failure_restarts(kube: KubeClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/flaky"
    script = (
        f"n=$(cat {ROOT}/state/n 2>/dev/null || echo 0); "
        f"echo $((n+1)) > {ROOT}/state/n; [ $n -ge 1 ]"
    )
    manifest = pod(
        "flaky",
        script,
        restartPolicy="OnFailure",
        container={"volumeMounts": [{"name": "state", "mountPath": "/state"}]},
        volumes=[{"name": "state", "emptyDir": {}}],
    )
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    obj = await wait_phase(kube, path, {"Succeeded"})
    status = obj["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0


async def test_missing_secret_keeps_pod_waiting(kube: KubeClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/waits"
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}]
    manifest = pod("waits", f"echo $X > {ROOT}/dev/termination-log", container={"env": env})
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)

    async def waiting() -> JSON | None:
        obj = await kube.get(path)
        for s in obj.get("status", {}).get("containerStatuses") or []:
            w = (s.get("state") or {}).get("waiting") or {}
            if w.get("reason") == "CreateContainerConfigError":
                return obj
        return None

    await wait_for(waiting, 30, "CreateContainerConfigError")
    with contextlib.suppress(ApiError):
        await kube.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {"metadata": {"name": "later"}, "stringData": {"k": "arrived"}},
        )
    obj = await wait_phase(kube, path, {"Succeeded"})
    term = terminated(obj)
    assert term is not None
    assert term["message"].strip() == "arrived"


async def test_job_runs_to_completion(kube: KubeClient, namespace: str) -> None:
    template = pod("ignored", f"echo done > {ROOT}/dev/termination-log")
    template["metadata"] = {"labels": {"app": "once"}}
    await kube.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "once"},
            "spec": {"backoffLimit": 0, "template": template},
        },
    )

    async def complete() -> JSON | None:
        job = await kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/once")
        conds = job.get("status", {}).get("conditions") or []
        done = any(c["type"] == "Complete" and c["status"] == "True" for c in conds)
        return job if done else None

    job = await wait_for(complete, 60, "the Job to complete")
    assert job["status"]["succeeded"] == 1
    pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=once")
    [only] = pods["items"]
    term = terminated(only)
    assert term is not None
    assert term["message"].strip() == "done"
