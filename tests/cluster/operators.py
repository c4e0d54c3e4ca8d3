"""The operator a cluster test runs against, the same way for every suite.

On the real node it is the chart's Deployment, from the image hack/build-image built, with the
chart's service account, RBAC and pod security: one Helm release per test in the test's
namespace. On the node agent (the fallback) and on an existing cluster it is a local process
(``python -m oma_operator``) with the cluster's kubeconfig, or with the chart's service account
when a test is about the chart. Either way a test starts it, SIGKILLs it (no cleanup, as a crash
or an OOM kill would; it stays away until started again), stops it (SIGTERM: its cleanup runs)
and reads one log file that every container or process of it appended to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import yaml

from devcluster import KubeClient
from devcluster.kube import JSON, ApiError
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import REAL_NODE_IMAGE
from tests.cluster.helpers import RUNNER_PODS, exec_kubeconfig, wait_for
from tests.cluster.operator_process import OperatorProcess
from tests.servers.process import free_port

CHART = Path(__file__).resolve().parents[2] / "charts" / "oma"
KUBE_VERSION = "1.37.2"  # what `helm template` is told (the test helm has no version ldflags)
CHART_METRICS_PORT = 8000  # the chart's metrics.port and metrics.runners.port
# The suites install the admission policies they test from deploy/ (cluster-wide, once); a
# release per test leaves its own off unless the test asks for them (the creator policy as
# "external": installed from deploy/, so the operator believes the created-by annotation).
QUIET_CHART = (
    "approvals.reviewerPolicy=false",
    "approvals.creatorPolicy=external",
    "teamRuns.referencePolicy=false",
    "teamRuns.runnerPodPolicy=false",
)


def helm(
    cluster: ClusterHandle, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cluster.tool("helm"), *args],
        capture_output=True,
        text=True,
        check=check,
        env={
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "HELM_CACHE_HOME": "/tmp/oma-helm-cache",
        },
    )


async def token_kubeconfig(
    kube: KubeClient, cluster: ClusterHandle, namespace: str, account: str, target: Path
) -> Path:
    """A kubeconfig that acts as ServiceAccount ``account`` (a fresh one-hour token)."""
    token = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(await asyncio.to_thread(cluster.kubeconfig.read_text))
    cluster_entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [cluster_entry],
        "users": [{"name": account, "user": {"token": token["status"]["token"]}}],
        "contexts": [
            {"name": "sa", "context": {"cluster": cluster_entry["name"], "user": account}}
        ],
    }
    await asyncio.to_thread(target.write_text, yaml.safe_dump(config))
    return target


@dataclass(frozen=True)
class OperatorSettings:
    """What a test wants of its operator, whichever way it runs."""

    progress_seconds: float | None = None  # operator.progressSeconds / OMA_PROGRESS_SECONDS
    env: Mapping[str, str] = field(default_factory=dict)  # operator.env
    metrics: bool = False  # the operator's /metrics and its runners' (metrics.*.enabled)
    # Namespaces watched besides the test's: a local process is told each; the chart's release
    # watches all namespaces (operator.watchAllNamespaces, the chart's multi-tenant setting).
    other_namespaces: tuple[str, ...] = ()
    chart_values: tuple[str, ...] = ()  # more `helm --set` values (later ones win)
    # A local process runs as the chart's operator account (the chart installed with
    # operator.replicas=0), with the chart's runner account; on the real node it always does.
    as_chart: bool = False
    # Concurrency limits (the chart's concurrency.*; OMA_MAX_RUNNING_* for a local process).
    per_namespace: int | None = None
    log_format: str | None = None  # logging.format / OMA_LOG_FORMAT
    events: str | None = None  # operator.events / OMA_EVENTS ("notable" or "all")
    # approvals.creatorPolicy (QUIET_CHART: "external") / OMA_CREATOR_POLICY; "false": the
    # operator is told the policy is absent and believes no created-by annotation.
    creator_policy: str | None = None
    # retention.ttlSecondsAfterFinished / OMA_TTL_SECONDS_AFTER_FINISHED
    ttl_after_finished: int | None = None
    delete_store_records: bool = False  # retention.deleteStoreRecords / OMA_DELETE_STORE_RECORDS
    per_provider: Mapping[str, int] = field(default_factory=dict)
    # A local process (on the real node too) whose kubeconfig is two files and an exec
    # credential plugin (helpers.exec_kubeconfig), as on EKS, GKE or AKS.
    exec_credentials: bool = False


class Operator(ABC):
    """One test's operator; ``async with`` starts it and stops it."""

    def __init__(self, log: Path) -> None:
        self.log = log

    @property
    @abstractmethod
    def release(self) -> str | None:
        """The chart's release in the test's namespace, if there is one."""

    @property
    @abstractmethod
    def runner_metrics_port(self) -> int:
        """The port runner pods serve /metrics on (with ``metrics``)."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def kill(self) -> None:
        """SIGKILL: no cleanup. It stays away until ``start()``."""

    @abstractmethod
    async def stop(self) -> None:
        """SIGTERM and wait: its cleanup runs (what ``helm uninstall`` does first)."""

    @abstractmethod
    async def metrics_address(self) -> str | None:
        """host:port of the operator's /metrics; None while nothing serves it."""

    async def close(self) -> None:
        """Stop it and remove what was installed for it."""
        await self.stop()

    async def __aenter__(self) -> Operator:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.stop()


def operator_for(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    log: Path,
    settings: OperatorSettings = OperatorSettings(),
) -> Operator:
    if cluster.real_node and not settings.exec_credentials:
        return DeploymentOperator(cluster, kube, namespace, log, settings)
    return ProcessOperator(cluster, kube, namespace, log, settings)


@contextlib.asynccontextmanager
async def operating(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    log: Path,
    settings: OperatorSettings = OperatorSettings(),
) -> AsyncIterator[Operator]:
    """A started operator, stopped and removed at the end."""
    operator = operator_for(cluster, kube, namespace, log, settings)
    try:
        await operator.start()
        yield operator
    finally:
        await operator.close()


def runner_account(release: str) -> str:
    """The chart's runner ServiceAccount of a release (runner.serviceAccountName unset)."""
    return f"{release}-runner"


def _chart_install(
    release: str, namespace: str, values: list[str], env: Mapping[str, str]
) -> list[str]:
    args = ["install", release, str(CHART), "-n", namespace, "--skip-crds", "--wait=false"]
    args += [arg for value in values for arg in ("--set", value)]
    if env:
        listed = [{"name": name, "value": value} for name, value in env.items()]
        args += ["--set-json", f"operator.env={json.dumps(listed)}"]
    return args


class ProcessOperator(Operator):
    """``python -m oma_operator`` on this machine."""

    def __init__(
        self,
        cluster: ClusterHandle,
        kube: KubeClient,
        namespace: str,
        log: Path,
        settings: OperatorSettings,
    ) -> None:
        super().__init__(log)
        self._cluster, self._kube, self._namespace = cluster, kube, namespace
        self._settings = settings
        self._release = f"op-{uuid.uuid4().hex[:6]}" if settings.as_chart else None
        self._args = [arg for other in settings.other_namespaces for arg in ("--namespace", other)]
        # As the chart's release does (QUIET_CHART): the creator policy comes from deploy/.
        told = "absent" if settings.creator_policy == "false" else "installed"
        self._env = {"OMA_CREATOR_POLICY": told, **settings.env}
        if settings.progress_seconds is not None:
            self._env["OMA_PROGRESS_SECONDS"] = str(settings.progress_seconds)
        if settings.per_namespace is not None:
            self._env["OMA_MAX_RUNNING_PER_NAMESPACE"] = str(settings.per_namespace)
        if settings.log_format is not None:
            self._env["OMA_LOG_FORMAT"] = settings.log_format
        if settings.events is not None:
            self._env["OMA_EVENTS"] = settings.events
        if settings.ttl_after_finished is not None:
            self._env["OMA_TTL_SECONDS_AFTER_FINISHED"] = str(settings.ttl_after_finished)
        if settings.delete_store_records:
            self._env["OMA_DELETE_STORE_RECORDS"] = "true"
        if settings.per_provider:
            limits = ",".join(f"{p}={n}" for p, n in settings.per_provider.items())
            self._env["OMA_MAX_RUNNING_PER_PROVIDER"] = limits
        self._metrics_port = self._runner_metrics_port = 0
        if settings.metrics:
            self._metrics_port, self._runner_metrics_port = free_port(), free_port()
            self._args += ["--metrics-address", "127.0.0.1"]
            self._args += ["--runner-metrics-port", str(self._runner_metrics_port)]
        self._args += ["--metrics-port", str(self._metrics_port)]
        self._process: OperatorProcess | None = None
        self.plugin_runs: Path | None = None  # with exec_credentials: the plugin counts here

    @property
    def release(self) -> str | None:
        return self._release

    @property
    def runner_metrics_port(self) -> int:
        return self._runner_metrics_port

    async def _prepare(self) -> OperatorProcess:
        kubeconfig = self._cluster.kubeconfig
        if self._release is not None:
            values = ["operator.replicas=0", *QUIET_CHART, *self._settings.chart_values]
            install = _chart_install(self._release, self._namespace, values, {})
            await asyncio.to_thread(helm, self._cluster, *install)
            account = f"{self._release}-operator"
            target = self.log.with_name(f"{self._release}.kubeconfig")
            kubeconfig = await token_kubeconfig(
                self._kube, self._cluster, self._namespace, account, target
            )
            self._env["OMA_RUNNER_SERVICE_ACCOUNT"] = runner_account(self._release)
        if self._settings.exec_credentials:
            listed, self.plugin_runs = exec_kubeconfig(kubeconfig, self.log.with_suffix(".exec"))
            kubeconfig = Path(listed)  # $KUBECONFIG as given: two files joined with ':'
        return OperatorProcess(kubeconfig, self._namespace, self.log, *self._args, **self._env)

    async def start(self) -> None:
        if self._process is None:
            self._process = await self._prepare()
        self._process.start()

    async def kill(self) -> None:
        assert self._process is not None, "the operator was never started"
        self._process.kill()

    async def stop(self) -> None:
        if self._process is not None:
            await asyncio.to_thread(self._process.stop)

    async def metrics_address(self) -> str | None:
        return f"127.0.0.1:{self._metrics_port}"

    async def close(self) -> None:
        await self.stop()
        if self._release is not None:
            uninstall = ["uninstall", self._release, "-n", self._namespace, "--no-hooks"]
            await asyncio.to_thread(helm, self._cluster, *uninstall, check=False)


class DeploymentOperator(Operator):
    """The chart's operator Deployment on the real node, its containers' logs followed."""

    def __init__(
        self,
        cluster: ClusterHandle,
        kube: KubeClient,
        namespace: str,
        log: Path,
        settings: OperatorSettings,
    ) -> None:
        super().__init__(log)
        self._cluster, self._kube, self._namespace = cluster, kube, namespace
        self._settings = settings
        self._release = f"op-{uuid.uuid4().hex[:6]}"
        self._installed = False
        self._follower: asyncio.Task[None] | None = None
        self._followed: dict[tuple[str, int], asyncio.subprocess.Process] = {}
        self._pods = f"/api/v1/namespaces/{namespace}/pods"
        self._selector = (
            f"app.kubernetes.io/instance={self._release},app.kubernetes.io/component=operator"
        )

    @property
    def release(self) -> str:
        return self._release

    @property
    def runner_metrics_port(self) -> int:
        return CHART_METRICS_PORT

    def _values(self) -> list[str]:
        repository, tag = REAL_NODE_IMAGE.rsplit(":", 1)
        values = [f"image.repository={repository}", f"image.tag={tag}", *QUIET_CHART]
        if self._settings.progress_seconds is not None:
            values.append(f"operator.progressSeconds={self._settings.progress_seconds}")
        if self._settings.metrics:
            values += ["metrics.enabled=true", "metrics.runners.enabled=true"]
        if self._settings.other_namespaces:
            values.append("operator.watchAllNamespaces=true")
        if self._settings.per_namespace is not None:
            values.append(f"concurrency.perNamespace={self._settings.per_namespace}")
        if self._settings.log_format is not None:
            values.append(f"logging.format={self._settings.log_format}")
        if self._settings.events is not None:
            values.append(f"operator.events={self._settings.events}")
        if self._settings.creator_policy is not None:
            values.append(f"approvals.creatorPolicy={self._settings.creator_policy}")
        if self._settings.ttl_after_finished is not None:
            values.append(f"retention.ttlSecondsAfterFinished={self._settings.ttl_after_finished}")
        if self._settings.delete_store_records:
            values.append("retention.deleteStoreRecords=true")
        values += [
            f"concurrency.perProvider.{p}={n}" for p, n in self._settings.per_provider.items()
        ]
        return [*values, *self._settings.chart_values]

    async def start(self) -> None:
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._follow())
        if not self._installed:  # its pod starts while the test sets up its TeamRun
            install = _chart_install(
                self._release, self._namespace, self._values(), self._settings.env
            )
            await asyncio.to_thread(helm, self._cluster, *install)
            self._installed = True
            return
        await self._scale(1)
        # Started again, it runs before the test goes on, so a test that kills it a moment
        # later (the chaos test) kills a live operator, not a pod still starting.
        await wait_for(self._running_pod, 120, f"the operator's container ({self._selector})")

    async def kill(self) -> None:
        running = await wait_for(self._running_pod, 60, "the operator's container to run")
        # The kill first, then no replicas: scaled down first, the pod would get its SIGTERM.
        await self._cluster.kill_container(
            self._kube, self._namespace, running["metadata"]["name"], "operator"
        )
        await self._scale(0)

    async def stop(self) -> None:
        if not self._installed:
            return
        await self._scale(0)

        async def gone() -> bool:
            return not (await self._kube.get(self._pods, labelSelector=self._selector))["items"]

        try:
            await wait_for(gone, 60, "the operator pod to stop")
        finally:
            await self._stop_following()

    async def close(self) -> None:
        try:
            if self._settings.as_chart:  # a test of the chart: stopped as helm uninstall does
                await self.stop()
            else:
                await self._drop()
        finally:
            # A release of namespaced objects only goes with the test's namespace; one with
            # cluster-wide objects (a ClusterRole, admission policies) is uninstalled.
            if self._installed and (self._settings.other_namespaces or self._settings.chart_values):
                uninstall = ["uninstall", self._release, "-n", self._namespace, "--no-hooks"]
                await asyncio.to_thread(helm, self._cluster, *uninstall, check=False)

    async def _drop(self) -> None:
        """The end of a test that is not about stopping: no replicas, and the runner pods'
        finalizers released here rather than waiting for the operator's SIGTERM cleanup (about
        2.5 s a test), so that deleting the namespace next completes either way."""
        if not self._installed:
            return
        await self._scale(0)
        await self._stop_following(wait=False)
        listed = await self._kube.get(self._pods, labelSelector=RUNNER_PODS)
        for pod in listed["items"]:
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(ApiError):  # gone meanwhile
                    path = f"{self._pods}/{pod['metadata']['name']}"
                    await self._kube.patch(path, {"metadata": {"finalizers": None}})

    async def metrics_address(self) -> str | None:
        running = await self._running_pod()
        ip = None if running is None else (running.get("status") or {}).get("podIP")
        return f"{ip}:{CHART_METRICS_PORT}" if ip else None

    async def _scale(self, replicas: int) -> None:
        deployment = f"/apis/apps/v1/namespaces/{self._namespace}/deployments"
        await self._kube.patch(
            f"{deployment}/{self._release}-operator", {"spec": {"replicas": replicas}}
        )

    async def _running_pod(self) -> JSON | None:
        for pod, _ in await self._running_containers():
            return pod
        return None

    async def _running_containers(self) -> list[tuple[JSON, int]]:
        listed = await self._kube.get(self._pods, labelSelector=self._selector)
        running = []
        for pod in listed["items"]:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status["name"] == "operator" and "running" in (status.get("state") or {}):
                    running.append((pod, int(status.get("restartCount", 0))))
        return running

    async def _follow(self) -> None:
        """Append each operator container's log to ``log``, from its first line."""
        kubectl = [self._cluster.tool("kubectl"), f"--kubeconfig={self._cluster.kubeconfig}"]
        while True:
            for pod, restarts in await self._running_containers():
                key = (pod["metadata"]["uid"], restarts)
                if key in self._followed:
                    continue
                with self.log.open("ab") as out:
                    self._followed[key] = await asyncio.create_subprocess_exec(
                        *kubectl, "-n", self._namespace, "logs", "-f",
                        pod["metadata"]["name"], "-c", "operator",
                        stdout=out, stderr=subprocess.STDOUT,
                    )  # fmt: skip
            await asyncio.sleep(0.5)

    async def _stop_following(self, *, wait: bool = True) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
            self._follower = None
        for process in self._followed.values():
            if not wait and process.returncode is None:
                process.kill()
            try:
                await asyncio.wait_for(process.wait(), 10)  # ends with its container
            except TimeoutError:
                process.kill()
                await process.wait()
