"""The demo, step by step: eviction mid-task, resume, approval, success; then the summary.

Each step checks what it expects to see and raises ``DemoError`` when it does not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from demolib.infra import (
    REPO,
    REVIEWER,
    InClusterOperator,
    LocalOperator,
    Operator,
    Tools,
    grant_reviewer,
    install_chart,
    operator_kubeconfig,
    run_tool,
    start_operator,
    start_redis,
    store_secret,
)
from demolib.views import (
    CheckpointView,
    DemoError,
    attempt_line,
    checkpoint_view,
    read_checkpoint,
    say,
    shown,
    step,
    wait_until,
)
from devcluster.cluster import running_cluster
from devcluster.kube import ApiError, KubeClient
from devcluster.kubeconfig import load_kubeconfig
from devcluster.sandbox import ENV_HOST_IP
from oma.tools import records
from oma.tools.records import RecordLocation

EXAMPLE = REPO / "examples" / "kubernetes" / "teamrun-demo.yaml"
Approver = Literal["kubectl", "oma"]


@dataclass
class Scene:
    """What the steps share."""

    kube: KubeClient
    tools: Tools
    env: dict[str, str]  # admin KUBECONFIG, helm's homes in the demo dir
    workdir: Path
    namespace: str
    operator: Operator
    redis_url: str  # as the demo reaches it
    redis_url_for_pods: str  # the same Redis as the runner pods reach it (the ledger's too)
    reviewer_kubeconfig: Path
    teamrun: dict[str, Any]
    summary: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.teamrun["metadata"]["name"])

    @property
    def run_id(self) -> str:
        return str(self.teamrun["spec"]["runId"])

    @property
    def ledger(self) -> RecordLocation:
        """Where every attempt's pod records payments: how the demo counts side effects."""
        return RecordLocation(url=self.redis_url, key=f"oma-demo:{self.namespace}:ledger")

    def path(self, resource: str, name: str = "") -> str:
        group = "/api/v1" if resource == "pods" else "/apis/oma.dev/v1alpha1"
        return f"{group}/namespaces/{self.namespace}/{resource}" + (f"/{name}" if name else "")

    async def status(self) -> dict[str, Any]:
        await self.operator.check()
        body = await self.kube.get(self.path("teamruns", self.name))
        return dict(body.get("status") or {})

    async def attempts(self, count: int) -> list[dict[str, Any]]:
        async def recorded() -> list[dict[str, Any]] | None:
            attempts: list[dict[str, Any]] = (await self.status()).get("attempts") or []
            return attempts if len(attempts) >= count else None

        return await wait_until(recorded, 90, f"attempt {count}'s outcome in the TeamRun status")

    async def checkpoint(self) -> CheckpointView | None:
        snapshot = await read_checkpoint(self.redis_url, self.run_id, self.namespace)
        return None if snapshot is None else checkpoint_view(snapshot)


async def demo(namespace: str, approver: Approver, image: str | None) -> None:
    """``image``: run on a real node (kubelet + containerd, inside devcluster's sandbox) with
    the operator in-cluster from that image; None: on the node agent, operator as a process."""
    async with AsyncExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="oma-demo-"))
        stack.callback(shutil.rmtree, workdir, True)  # registered first: runs last
        tools = Tools.find()
        node = "node agent" if image is None else "a real node (kubelet + containerd)"
        step(1, f"local control plane: etcd, kube-apiserver, kube-controller-manager, {node}")
        (workdir / "cluster").mkdir()
        cluster = running_cluster(workdir / "cluster", real_node=image is not None)
        running = await stack.enter_async_context(cluster)
        control = running.control_plane
        pods = "pods run as local processes" if image is None else f"pods run from {image}"
        say(f"up in {running.start_seconds:.1f}s at {control.server} ({pods})")
        admin = KubeClient(load_kubeconfig(control.admin_kubeconfig))
        kube = await stack.enter_async_context(admin)
        env = {**os.environ, "KUBECONFIG": str(control.admin_kubeconfig)}
        env |= {f"HELM_{kind}_HOME": str(workdir / "helm" / kind) for kind in ("CACHE", "CONFIG")}
        env["HELM_DATA_HOME"] = str(workdir / "helm" / "DATA")

        step(2, f"Helm chart charts/oma into namespace {namespace} (restricted pod security)")
        await install_chart(kube, tools, namespace, env, image)

        step(3, "the operator (chart service account), a Redis store, a reviewer")
        operator: Operator
        if image is None:
            token = await operator_kubeconfig(
                kube, control.admin_kubeconfig, namespace, workdir / "operator.kubeconfig"
            )
            process = await start_operator(token, namespace, workdir)
            stack.push_async_callback(process.stop, 15)
            operator = LocalOperator(process)
        else:
            in_cluster = InClusterOperator(kube, tools, env, namespace)
            say(f"operator pod {await in_cluster.ready()} Ready (the chart's Deployment)")
            operator = in_cluster
        redis = await start_redis(tools.redis_server, workdir, os.environ.get(ENV_HOST_IP))
        stack.push_async_callback(redis.process.stop, 5)
        await store_secret(kube, namespace, redis.url_for_pods)
        say("Secret oma-store holds the store URL; runner pods get it as a secretKeyRef")
        await grant_reviewer(kube, namespace, REVIEWER)
        reviewer = control.mint_kubeconfig(REVIEWER)
        say(f"user {REVIEWER} (client certificate) may get/list/patch approvaldecisions")

        teamrun = yaml.safe_load(EXAMPLE.read_text())
        urls = (redis.url, redis.url_for_pods)
        scene = Scene(kube, tools, env, workdir, namespace, operator, *urls, reviewer, teamrun)
        try:
            await story(scene, approver)
        except Exception:  # not on Ctrl-C: the reader knows why it stopped
            say(f"\n--- operator log (last lines) ---\n{await operator.tail(25)}")
            raise
        print_summary(scene)


async def story(scene: Scene, approver: Approver) -> None:
    await start_run(scene)
    await evict_first_attempt(scene)
    await second_attempt(scene)
    await approve(scene, approver)
    await finish(scene)


async def start_run(scene: Scene) -> None:
    step(4, "a TeamRun: attempt 1 starts, the demo waits until it is mid-task")
    runner = scene.teamrun["spec"].setdefault("runner", {})
    # One ledger (a Redis list) for every attempt's pod: it is how the demo counts effects.
    runner.setdefault("env", []).extend(
        [
            {"name": "OMA_LEDGER_URL", "value": scene.redis_url_for_pods},
            {"name": "OMA_LEDGER_KEY", "value": str(scene.ledger.key)},
        ]
    )
    argv = [scene.tools.kubectl, "-n", scene.namespace, "apply", "-f", "-"]
    manifest = yaml.safe_dump(scene.teamrun)

    async def applied() -> subprocess.CompletedProcess[str] | None:
        # Right after `helm install`, the API server may not serve the new CRD to its admission
        # policies yet (503 "Resource kind ... not found"): that passes within seconds.
        done = await run_tool(argv, scene.env, stdin=manifest, check=False)
        if done.returncode == 0:
            return done
        if "ServiceUnavailable" in done.stderr or "storage is (re)initializing" in done.stderr:
            return None
        raise DemoError(f"{shown(argv)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")

    done = await wait_until(applied, 60, "the API server to take TeamRuns")
    say(f"$ {shown(argv)} < examples/kubernetes/teamrun-demo.yaml  (+ OMA_LEDGER_URL for pods)")
    say(f"  {done.stdout.strip()}")

    async def mid_task() -> CheckpointView | None:
        await scene.status()  # fails fast if the operator died
        view = await scene.checkpoint()
        return view if view is not None and view.done_calls else None

    view = await wait_until(mid_task, 90, "attempt 1 to commit its first tool result")
    say(f"checkpoint: {view.line()}")


async def evict_first_attempt(scene: Scene) -> None:
    pod = f"{scene.name}-a1"
    step(5, f"evict {pod} through the Eviction API while its task runs")
    say(f"POST {scene.path('pods', pod)}/eviction   (the API kubectl drain uses)")
    await scene.kube.create(
        scene.path("pods", pod) + "/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": scene.namespace},
        },
    )
    first = (await scene.attempts(1))[0]
    say(attempt_line(first))
    if first.get("outcome") != "disruption" or first.get("exitCode") != 11:
        raise DemoError(f"attempt 1 was not a drained disruption: {first}")
    scene.summary["attempt 1"] = (
        f"evicted mid-task: pod {pod} {first['reason']}, drained with exit 11 "
        "(checkpoint flushed at the next boundary)"
    )


async def second_attempt(scene: Scene) -> None:
    pod_name = f"{scene.name}-a2"
    step(6, f"attempt 2: {pod_name} resumes from the checkpoint, then waits for an approval")
    pod = await wait_until(lambda: _pod_or_none(scene, pod_name), 60, f"pod {pod_name} (attempt 2)")
    pod_env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    run_id, attempt = pod_env.get("OMA_RUN_ID"), pod_env.get("OMA_ATTEMPT")
    say(f"pod {pod_name}: OMA_RUN_ID={run_id} OMA_ATTEMPT={attempt}")
    if (run_id, attempt) != (scene.run_id, "2"):
        raise DemoError(f"{pod_name} is not attempt 2 of run {scene.run_id}: {pod_env}")
    second = (await scene.attempts(2))[1]
    say(attempt_line(second))
    if second.get("outcome") != "suspended":
        raise DemoError(f"attempt 2 did not suspend on an approval of run {scene.run_id}: {second}")
    view = await scene.checkpoint()
    if view is None or not view.awaiting:
        raise DemoError(f"the checkpoint shows no tool call awaiting approval: {view}")
    if (view.run_id, view.attempt) != (scene.run_id, 2):
        raise DemoError(f"attempt 2 did not resume the checkpoint of attempt 1: {view.line()}")
    say(f"checkpoint: {view.line()}")
    scene.summary["attempt 2"] = (
        f"resumed: pod {pod_name}, same runId {scene.run_id}, engine attempt 2 restored from "
        f"attempt 1's checkpoint; suspended on {len(view.awaiting)} approval "
        f"(exit {second.get('exitCode')})"
    )


async def approve(scene: Scene, approver: Approver) -> None:
    how = "kubectl patch" if approver == "kubectl" else "oma approve"
    step(7, f"approve the tool call as {REVIEWER} with {how}")

    async def created() -> dict[str, Any] | None:
        body = await scene.kube.get(
            scene.path("approvaldecisions"), labelSelector=f"oma.dev/teamrun={scene.name}"
        )
        items: list[dict[str, Any]] = body.get("items") or []
        return items[0] if items else None

    decision = await wait_until(created, 60, "the operator's ApprovalDecision")
    name = decision["metadata"]["name"]
    listing = [scene.tools.kubectl, "-n", scene.namespace, "get", "approvaldecisions"]
    say(f"$ {shown(listing)}\n{(await run_tool(listing, scene.env)).stdout.rstrip()}")
    reviewer_env = {**scene.env, "KUBECONFIG": str(scene.reviewer_kubeconfig)}
    oma = [shutil.which("oma") or "oma", "approve", name, "-n", scene.namespace]
    if approver == "kubectl":
        await _approve_with_kubectl(scene, name, reviewer_env)
        say(f"  (or: {shown(oma)}: the same three steps in one command)")
    else:
        say(f"$ KUBECONFIG={REVIEWER}.kubeconfig {shown(oma)}")
        done = await run_tool(oma, reviewer_env)
        say("\n".join(f"  {line}" for line in done.stdout.rstrip().splitlines()))
        say(f"  (or with kubectl: {shown(_patch_argv(scene, name, REVIEWER))})")
    spec = (await scene.kube.get(scene.path("approvaldecisions", name)))["spec"]
    if (spec.get("decision"), spec.get("reviewer")) != ("Approved", REVIEWER):
        raise DemoError(f"{name} was not approved by {REVIEWER}: {spec}")
    summary_line = str(spec.get("summary", "")).splitlines()[0]
    scene.summary["approval"] = (
        f"{name} Approved by {REVIEWER} with {how} (reviewer = the caller's Kubernetes "
        f"identity, enforced by the chart's policy): {summary_line} "
        f"hash {spec['requestHash'][:12]}…"
    )


def _patch_argv(scene: Scene, name: str, reviewer: str) -> list[str]:
    patch = json.dumps({"spec": {"decision": "Approved", "reviewer": reviewer}})
    kubectl = [scene.tools.kubectl, "-n", scene.namespace, "patch", "approvaldecision", name]
    return [*kubectl, "--type=merge", "-p", patch]


async def _approve_with_kubectl(scene: Scene, name: str, reviewer_env: dict[str, str]) -> None:
    """What a reviewer types: read what is asked, find out who you are to the API server (the
    chart's ValidatingAdmissionPolicy admits no other reviewer name), patch the decision."""
    as_reviewer = f"KUBECONFIG={REVIEWER}.kubeconfig"
    kubectl = [scene.tools.kubectl, "-n", scene.namespace]
    read = [*kubectl, "get", "approvaldecision", name, "-o", "jsonpath={.spec.summary}"]
    say(f"$ {as_reviewer} {shown(read)}")
    summary = (await run_tool(read, reviewer_env)).stdout.rstrip()
    say("\n".join(f"  {line}" for line in summary.splitlines()))
    whoami = [scene.tools.kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]
    say(f"$ {as_reviewer} {shown(whoami)}")
    identity = (await run_tool(whoami, reviewer_env)).stdout.strip()
    say(f"  {identity}")
    if identity != REVIEWER:
        raise DemoError(f"the reviewer kubeconfig authenticates as {identity!r}, not {REVIEWER}")
    patch = _patch_argv(scene, name, identity)
    say(f"$ {as_reviewer} {shown(patch)}")
    say(f"  {(await run_tool(patch, reviewer_env)).stdout.strip()}")


async def finish(scene: Scene) -> None:
    step(8, "attempt 3 runs the approved call and the run succeeds")

    async def ended() -> dict[str, Any] | None:
        status = await scene.status()
        return status if status.get("phase") in ("Succeeded", "Failed", "Rejected") else None

    status = await wait_until(ended, 90, "the TeamRun to finish")
    attempts = status.get("attempts") or []
    for record in attempts[2:]:
        say(attempt_line(record))
    outcomes = [record.get("outcome") for record in attempts]
    if status["phase"] != "Succeeded" or outcomes != ["disruption", "suspended", "succeeded"]:
        ended_as = f"the run ended {status['phase']} after attempts {outcomes}"
        raise DemoError(f"{ended_as}: {status.get('message')}")
    listing = [scene.tools.kubectl, "-n", scene.namespace, "get", "teamruns"]
    say(f"$ {shown(listing)}\n{(await run_tool(listing, scene.env)).stdout.rstrip()}")
    # The attempt log next to the snapshot, as any user of the store can read it.
    show = [
        *(shutil.which("oma") or "oma", "checkpoint", "show", "--run-id", scene.run_id),
        *("--tenant", scene.namespace),  # a TeamRun's keys are in its namespace's part
    ]
    store_env = {**scene.env, "OMA_STORE_URL": scene.redis_url}
    say(f"$ OMA_STORE_URL=redis://… {shown(show)}")
    say((await run_tool(show, store_env)).stdout.rstrip())
    entries = await records.read(scene.ledger)
    if len(entries) != 1:
        raise DemoError(f"the ledger should hold the approved payment once, it holds {entries}")
    view = await scene.checkpoint()
    if view is None or view.attempt != 3 or f"approved by {REVIEWER}" not in view.line():
        raise DemoError(f"the final checkpoint is not attempt 3 with the approval: {view}")
    recorded = (await scene.kube.get(scene.path("approvaldecisions")))["items"][0]["status"]
    if not recorded.get("recorded"):
        raise DemoError(f"the operator did not record the decision in the store: {recorded}")
    scene.summary["attempt 3"] = f"succeeded: pod {scene.name}-a3 ran the approved call (exit 0)"
    scene.summary["approval"] += "; recorded in the run's store ledger by the operator"
    scene.summary["checkpoint"] = view.line()
    scene.summary["side effects"] = (
        f"ledger holds 1 entry: {entries[0]['entry']!r} ({entries[0]['amount']:g}), "
        "the approved call ran exactly once"
    )
    scene.summary["final phase"] = str(status["phase"])


def print_summary(scene: Scene) -> None:
    rows = {"run": f"{scene.run_id} (TeamRun {scene.namespace}/{scene.name})", **scene.summary}
    say("\n==> summary")
    order = ("run", "attempt 1", "attempt 2", "attempt 3", "checkpoint", "approval")
    for key in (*order, "side effects", "final phase"):
        say(f"  {key:<14} {rows[key]}")


async def _pod_or_none(scene: Scene, name: str) -> dict[str, Any] | None:
    try:
        return await scene.kube.get(scene.path("pods", name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
