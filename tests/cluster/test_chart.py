"""The Helm chart: lint, schema, CRD copies, and installs whose RBAC alone is enough for the
operator to survive an eviction and run an approval, with runner pods admitted under the
restricted PSS. On the real node the operator is the chart's Deployment; elsewhere a local
process with the chart's service account (tests/cluster/operators.py)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma_operator.election.elector import Elector
from oma_operator.election.rules import Timing
from oma_operator.k8s.client import Kube
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import delete_namespace, evict, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    store_secret,
    teamrun,
    teamruns_admitted,
)
from tests.cluster.operators import (
    CHART,
    KUBE_VERSION,
    OperatorSettings,
    helm,
    operating,
    runner_account,
    token_kubeconfig,
)

__all__ = ["crds_installed"]  # a fixture
pytestmark = pytest.mark.cluster


def test_lint_and_template(cluster: ClusterHandle) -> None:
    assert "0 chart(s) failed" in helm(cluster, "lint", str(CHART)).stdout
    rendered = helm(
        cluster, "template", "t", str(CHART), "-n", "oma", "--kube-version", KUBE_VERSION
    ).stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered) if doc]
    assert sorted(kinds) == sorted(
        [
            "ServiceAccount",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            # leader election: the operator's Lease
            "Role",
            "RoleBinding",
            # the pre-delete hook that stops the operator before its RBAC goes
            "Role",
            "RoleBinding",
            "Job",
        ]
    )
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}
    names = {name for _, name in docs}
    # Cluster-scoped names carry the namespace: a release "t" elsewhere has its own.
    assert {
        "t-oma-approval-decisions",
        "t-oma-teamrun-creator",
        "t-oma-teamrun-editors",
        "t-oma-teamrun-references",
        "t-oma-runner-pods",
    } <= names
    teamruns = next(
        r for r in docs["Role", "t-operator"]["rules"] if r["resources"] == ["teamruns"]
    )
    assert "start" in teamruns["verbs"]  # what the runner-pods policy asks of pod makers
    # held to in the release's namespace only: releases elsewhere (maybe of an older chart,
    # without the verb) keep making their pods
    binding = docs["ValidatingAdmissionPolicyBinding", "t-oma-runner-pods"]["spec"]
    selector = binding["matchResources"]["namespaceSelector"]
    assert selector == {"matchLabels": {"kubernetes.io/metadata.name": "oma"}}
    assert ("ServiceAccount", "t-runner") in docs  # per release: two in one namespace coexist
    hook = docs["Job", "t-operator-stop"]
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    (stopper,) = hook["spec"]["template"]["spec"]["containers"]
    assert "--stop-deployment=t-operator" in stopper["args"]
    assert hook["spec"]["template"]["spec"]["serviceAccountName"] == "t-operator"
    # it may read and scale that one Deployment, nothing else
    rules = docs["Role", "t-operator-stop"]["rules"]
    assert [(r["resources"], r["resourceNames"], r["verbs"]) for r in rules] == [
        (["deployments"], ["t-operator"], ["get"]),
        (["deployments/scale"], ["t-operator"], ["patch"]),
    ]
    without = helm(
        cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "operator.uninstallHook=false",
    ).stdout  # fmt: skip
    assert "pre-delete" not in without
    off = helm(
        cluster,
        "template",
        "t",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "approvals.creatorPolicy=false",
        "--set",
        "approvals.reviewerPolicy=false",
        "--set",
        "teamRuns.referencePolicy=false",
        "--set",
        "teamRuns.runnerPodPolicy=false",
    ).stdout
    assert "AdmissionPolicy" not in off
    wide = helm(
        cluster,
        "template",
        "t",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "operator.watchAllNamespaces=true",
    ).stdout
    assert "kind: ClusterRole" in wide and "--all-namespaces" in wide
    (everywhere,) = [
        d
        for d in yaml.safe_load_all(wide)
        if d
        and d["kind"] == "ValidatingAdmissionPolicyBinding"
        and "runner-pods" in d["metadata"]["name"]
    ]
    assert "matchResources" not in everywhere["spec"]  # its operator makes pods everywhere


def test_helm_template_works_without_a_cluster_with_the_built_helm(
    cluster: ClusterHandle,
) -> None:
    """No --kube-version: the helm that hack/k8s/ensure-binaries builds knows its own version
    and assumes this Kubernetes (an unstamped build assumed v1.20 and refused the chart)."""
    assert "v3.22.0" in helm(cluster, "version", "--short").stdout
    rendered = helm(cluster, "template", "t", str(CHART)).stdout
    assert any(doc and doc["kind"] == "Deployment" for doc in yaml.safe_load_all(rendered))


def test_operator_pod_knobs_render_and_bad_ones_fail_the_schema(cluster: ClusterHandle) -> None:
    values = {
        "imagePullSecrets": '[{"name": "regcred"}, {"name": "mirror"}]',
        "operator.podLabels": '{"cost-center": "platform", "app.kubernetes.io/name": "hijack"}',
        "operator.podAnnotations": '{"example.com/owner": "ops"}',
        "operator.affinity": '{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": '
        '{"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", '
        '"values": ["system"]}]}]}}}',
        "operator.priorityClassName": '"system-cluster-critical"',
        "operator.events": '"all"',
    }
    args = [a for key, value in values.items() for a in ("--set-json", f"{key}={value}")]
    rendered = helm(
        cluster, "template", "t", str(CHART), "-n", "oma", "--kube-version", KUBE_VERSION, *args
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["cost-center"] == "platform"
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "oma"  # ours win
    assert template["metadata"]["annotations"] == {"example.com/owner": "ops"}
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["affinity"]["nodeAffinity"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["OMA_RUNNER_IMAGE_PULL_SECRETS"] == "regcred,mirror"  # for runner pods too
    assert env["OMA_EVENTS"] == "all"
    for key, bad, where in [
        ("imagePullSecrets", '["regcred"]', "/imagePullSecrets/0"),
        ("operator.priorityClassName", '"Not A Name"', "/operator/priorityClassName"),
        ("operator.podLabels", '{"k": 1}', "/operator/podLabels/k"),
        ("operator.events", '"some"', "/operator/events"),
    ]:
        refused = _template_refused(cluster, "--set-json", f"{key}={bad}")
        assert refused.returncode != 0 and where in refused.stderr, (key, refused.stderr)


def _template_refused(cluster: ClusterHandle, *args: str) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``args``, which the caller expects to fail."""
    return helm(
        cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION, *args, check=False
    )


def _operator_env(cluster: ClusterHandle, *args: str) -> dict[str, str | None]:
    """The operator container's environment, name to value, rendered with ``args``."""
    return {e["name"]: e.get("value") for e in _operator_container(cluster, *args)["env"]}


def _operator_container(cluster: ClusterHandle, *args: str) -> dict[str, Any]:
    """The operator container of the chart rendered with ``args`` (``helm template``)."""
    rendered = helm(cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION, *args)
    (deployment,) = [
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"
    ]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_concurrency_limits_render_as_the_operators_env_and_bad_ones_fail_the_schema(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    unset = _operator_env(cluster)
    assert "OMA_MAX_RUNNING_PER_NAMESPACE" not in unset
    assert "OMA_MAX_RUNNING_PER_PROVIDER" not in unset
    # A values file: YAML numbers reach the template as floats; a million must stay a whole number.
    values = tmp_path / "values.yaml"
    values.write_text(
        "concurrency:\n  perNamespace: 1000000\n  perProvider: {openai: 10, anthropic: 20}\n"
    )
    env = _operator_env(cluster, "-f", str(values))
    assert env["OMA_MAX_RUNNING_PER_NAMESPACE"] == "1000000"
    assert env["OMA_MAX_RUNNING_PER_PROVIDER"] == "anthropic=20,openai=10"
    assert _operator_env(cluster, "--set", "concurrency.perNamespace=3")[
        "OMA_MAX_RUNNING_PER_NAMESPACE"
    ] == ("3")
    for value, where in [
        ("concurrency.perNamespace=-1", "/concurrency/perNamespace"),
        ("concurrency.perProvider.gemini=1", "additional properties 'gemini' not allowed"),
        ("concurrency.perProvider.openai=0", "/concurrency/perProvider/openai"),
        ("concurrency.perNamespace=two", "/concurrency/perNamespace"),
    ]:
        refused = _template_refused(cluster, "--set", value)
        assert refused.returncode != 0 and where in refused.stderr, (value, refused.stderr)


def test_logging_renders_as_the_operator_s_arguments_and_bad_values_fail_the_schema(
    cluster: ClusterHandle,
) -> None:
    def operator_args(*args: str) -> list[str]:
        found: list[str] = _operator_container(cluster, *args)["args"]
        return found

    defaults = operator_args()
    assert "--log-format=plain" in defaults and "--log-level=info" in defaults
    chosen = operator_args("--set", "logging.format=json", "--set", "logging.level=debug")
    assert "--log-format=json" in chosen and "--log-level=debug" in chosen
    for value, where in [
        ("logging.format=xml", "/logging/format"),
        ("logging.level=trace", "/logging/level"),
        ("logging.colour=true", "additional properties 'colour' not allowed"),
    ]:
        refused = _template_refused(cluster, "--set", value)
        assert refused.returncode != 0 and where in refused.stderr, (value, refused.stderr)


def test_retention_renders_as_the_operator_s_env_and_bad_values_fail_the_schema(
    cluster: ClusterHandle,
) -> None:
    unset = _operator_env(cluster)
    assert "OMA_TTL_SECONDS_AFTER_FINISHED" not in unset  # kept by default
    assert "OMA_DELETE_STORE_RECORDS" not in unset
    tidy = _operator_env(cluster, "--set", "retention.deleteStoreRecords=true")
    assert tidy["OMA_DELETE_STORE_RECORDS"] == "true"
    day = _operator_env(cluster, "--set", "retention.ttlSecondsAfterFinished=86400")
    assert day["OMA_TTL_SECONDS_AFTER_FINISHED"] == "86400"
    at_once = _operator_env(cluster, "--set", "retention.ttlSecondsAfterFinished=0")
    assert at_once["OMA_TTL_SECONDS_AFTER_FINISHED"] == "0"
    assert "OMA_RUNNER_OTLP_ENDPOINT" not in unset  # no traces by default
    traced = _operator_env(cluster, "--set", "tracing.otlpEndpoint=http://otel-collector.obs:4318")
    assert traced["OMA_RUNNER_OTLP_ENDPOINT"] == "http://otel-collector.obs:4318"
    not_a_url = _template_refused(cluster, "--set", "tracing.otlpEndpoint=collector:4318")
    assert not_a_url.returncode != 0 and "/tracing/otlpEndpoint" in not_a_url.stderr
    for value in (
        "retention.ttlSecondsAfterFinished=-1",
        "retention.ttlSecondsAfterFinished=x",
        "retention.deleteStoreRecords=maybe",
    ):
        refused = _template_refused(cluster, "--set", value)
        assert refused.returncode != 0, value
        assert "/retention/" in refused.stderr, refused.stderr


def test_the_api_rate_limit_renders_as_the_operator_s_env_and_bad_values_fail_the_schema(
    cluster: ClusterHandle,
) -> None:
    default = _operator_env(cluster)
    assert (default["OMA_API_QPS"], default["OMA_API_BURST"]) == ("100", "200")
    set_ = _operator_env(
        cluster, "--set-json", "operator.apiQPS=25.5", "--set", "operator.apiBurst=40"
    )
    assert (set_["OMA_API_QPS"], set_["OMA_API_BURST"]) == ("25.5", "40")
    for value in ("operator.apiQPS=0", "operator.apiBurst=0", "operator.apiBurst=1.5"):
        refused = _template_refused(cluster, "--set", value)
        assert refused.returncode != 0, value
        assert "/operator/api" in refused.stderr, refused.stderr


def test_a_typo_in_values_fails_the_schema(cluster: ClusterHandle) -> None:
    result = helm(
        cluster,
        "template",
        "t",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "operator.replicaz=1",
        check=False,
    )
    assert result.returncode != 0 and "additional properties 'replicaz' not allowed" in (
        result.stderr
    )


def test_chart_crds_are_the_generated_crds() -> None:
    generated = CHART.parents[1] / "crds"
    for path in generated.glob("*.yaml"):
        assert (CHART / "crds" / path.name).read_text() == path.read_text(), (
            f"charts/oma/crds/{path.name} differs from crds/: copy it again"
        )


@pytest.mark.timeout(300)
async def test_installed_chart_rbac_runs_the_eviction_resume(
    cluster: ClusterHandle,
    kube: KubeClient,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
    crds_installed: None,
) -> None:
    namespace = f"oma-{uuid.uuid4().hex[:8]}"
    await kube.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        },
    )
    await store_secret(kube, namespace, e2e_redis.for_pods)
    log = tmp_path / "operator.log"
    as_chart = OperatorSettings(as_chart=True)
    try:
        async with operating(cluster, kube, namespace, log, as_chart) as operator:
            script: list[dict[str, Any]] = [
                {"tool_calls": [{"id": "h1", "name": "ledger_append", "input": {"entry": "a"}}]},
                {
                    "tool_calls": [{"id": "h2", "name": "ledger_append", "input": {"entry": "b"}}],
                    "delay": 4,
                },
                {"text": "done"},
            ]
            await kube.create(TEAMRUNS.format(ns=namespace), teamrun("chart", script, effects))

            async def first() -> bool:
                return await effects.ledger() == ["a"]

            await wait_for(first, 90, "attempt 1's first entry")
            pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/chart-a1")
            assert operator.release is not None  # admitted under restricted PSS:
            assert pod["spec"]["serviceAccountName"] == runner_account(operator.release)
            await evict(kube, namespace, "chart-a1")
            status = await finished(kube, namespace, "chart", 180)
    finally:
        await delete_namespace(kube, namespace)
    log_text = await asyncio.to_thread(log.read_text)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, log_text[-3000:]
    assert await effects.ledger() == ["a", "b"]
    # A refused request shows as an httpx response line or a KubeError; a bare "403" would also
    # match a timestamp's milliseconds or a port.
    refused = re.findall(r"HTTP/1\.1 403|answered 403|Forbidden", log_text)
    assert refused == [], log_text[-3000:]


@pytest.mark.timeout(300)
async def test_installed_chart_policies_and_rbac_run_an_approval(
    cluster: ClusterHandle,
    kube: KubeClient,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
    crds_installed: None,
) -> None:
    """With the chart's admission policies on (the default), the operator's own account
    publishes ApprovalDecisions (its Role holds the 'publish' verb), a reviewer bound by
    deploy/reviewer-role.yaml decides with kubectl, and the chart's creator policy records who
    created the TeamRun."""
    namespace = f"oma-{uuid.uuid4().hex[:8]}"
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    await store_secret(kube, namespace, e2e_redis.for_pods)
    role = yaml.safe_load_all((CHART.parents[1] / "deploy" / "reviewer-role.yaml").read_text())
    for doc in role:
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "RoleBinding":
            doc["subjects"] = [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "rita"}
            ]
        plural = "roles" if doc["kind"] == "Role" else "rolebindings"
        await kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}", doc
        )
    log = tmp_path / "operator.log"
    policies = (  # the chart's defaults, which a test's release otherwise turns off
        "approvals.reviewerPolicy=true",
        "approvals.creatorPolicy=true",
        "teamRuns.referencePolicy=true",
        "teamRuns.runnerPodPolicy=true",
    )
    settings = OperatorSettings(as_chart=True, chart_values=policies)
    async with operating(cluster, kube, namespace, log, settings) as operator:
        release = operator.release
        assert release is not None
        await teamruns_admitted(kube)

        async def creator_recorded() -> bool:
            # A dry run passes admission before a policy created a moment ago applies to it.
            probe = teamrun("probe", [])
            try:
                made = await kube.create(f"{TEAMRUNS.format(ns=namespace)}?dryRun=All", probe)
            except ApiError as exc:
                if exc.status == 503:  # the policy's schema is not published to it yet
                    return False
                raise
            return "oma.dev/created-by" in (made["metadata"].get("annotations") or {})

        await wait_for(creator_recorded, 60, "the chart's creator policy to apply")
        script: list[dict[str, Any]] = [
            {"tool_calls": [{"id": "p1", "name": "ledger_append", "input": {"entry": "pay"}}]},
            {"text": "paid"},
        ]
        body = teamrun("gated", script, effects)
        body["spec"]["approvals"] = {
            "tools": ["ledger_append"],
            "reviewers": {"default": {"users": ["rita"]}},
        }
        created = await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert created["metadata"]["annotations"]["oma.dev/created-by"] == "admin"

        async def published() -> dict[str, Any] | None:
            items = (
                await kube.get(f"/apis/oma.dev/v1alpha1/namespaces/{namespace}/approvaldecisions")
            )["items"]
            return items[0] if items and (items[0].get("status") or {}).get("verified") else None

        decision = await wait_for(published, 90, "the operator to publish the request")
        assert decision["spec"]["reviewers"] == {"users": ["rita"]}
        patch = '{"spec":{"decision":"Approved","reviewer":"rita"}}'
        rita = cluster.mint_kubeconfig("rita")
        kubectl = [cluster.tool("kubectl"), "--kubeconfig", str(rita), "-n", namespace]
        await asyncio.to_thread(
            subprocess.run,
            [*kubectl, "patch", "ad", decision["metadata"]["name"], "--type=merge", "-p", patch],
            check=True,
            capture_output=True,
        )
        status = await finished(kube, namespace, "gated", 150)
    log_text = await asyncio.to_thread(log.read_text)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, log_text[-3000:]
    assert await effects.ledger() == ["pay"]
    assert re.findall(r"HTTP/1\.1 403|answered 403|Forbidden", log_text) == [], log_text[-3000:]
    remaining = await kube.get("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies")
    assert not [p for p in remaining["items"] if p["metadata"]["name"].startswith(release)]


def _render(cluster: ClusterHandle, *values: str, json_values: str = "") -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    sets += ["--set-json", json_values] if json_values else []
    rendered = helm(
        cluster, "template", "t", str(CHART), "-n", "oma", "--kube-version", KUBE_VERSION, *sets
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def test_metrics_render_a_service_monitors_and_scrape_annotations(cluster: ClusterHandle) -> None:
    off = _render(cluster)
    (deployment,) = [d for d in off if d["kind"] == "Deployment"]
    assert "--metrics-port=0" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    docs = _render(
        cluster,
        "metrics.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
        "metrics.runners.enabled=true",
        "metrics.runners.port=9100",
        "metrics.runners.podMonitor.enabled=true",
        "networkPolicy.enabled=true",
    )
    by_kind = {d["kind"]: d for d in docs}
    template = by_kind["Deployment"]["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert {"--metrics-port=8000", "--runner-metrics-port=9100"} <= set(container["args"])
    assert "--metrics-address=0.0.0.0" in container["args"]  # the pod's, to be scraped
    assert {"name": "metrics", "containerPort": 8000} in container["ports"]
    annotations = template["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
    }
    service = by_kind["Service"]
    assert service["metadata"]["name"] == "t-operator-metrics"
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8000, "targetPort": "metrics", "protocol": "TCP"}
    ]
    monitor = by_kind["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    pods = by_kind["PodMonitor"]
    assert pods["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pods["spec"]["selector"]["matchExpressions"][0]["key"] == "oma.dev/teamrun"
    (rule,) = by_kind["NetworkPolicy"]["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}] and "from" not in rule
    peers = _render(
        cluster,
        "metrics.runners.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
    )
    (policy,) = [d for d in peers if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    ]
    no_monitors = _render(cluster, "metrics.enabled=true")
    assert "ServiceMonitor" not in {d["kind"] for d in no_monitors}  # no CRD needed by default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["metrics.serviceMonitor.enabled=true"], "needs metrics.enabled"),
        (["metrics.runners.podMonitor.enabled=true"], "needs metrics.runners.enabled"),
        (["metrics.enabled=true", "metrics.port=8080"], "must differ from operator.livenessPort"),
        (["metrics.port=0"], "/metrics/port"),
        (["metrics.serviceMonitor.interval=soon"], "does not match pattern"),
    ],
)
def test_bad_metrics_values_fail_with_a_message(
    cluster: ClusterHandle, values: list[str], message: str
) -> None:
    sets = [arg for value in values for arg in ("--set", value)]
    result = helm(
        cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION, *sets, check=False
    )
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_the_creator_policy_value_tells_the_operator_whether_to_believe_the_annotation(
    cluster: ClusterHandle,
) -> None:
    """true: the chart installs the policy and the operator believes oma.dev/created-by;
    "external": installed from deploy/, believed; false: not installed, not believed (a
    TeamRun's author could write the annotation herself)."""
    for value, policy, told in [
        ("true", True, "installed"),
        ("external", False, "installed"),
        ("false", False, "absent"),
    ]:
        rendered = helm(
            cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
            "--set", f"approvals.creatorPolicy={value}",
        ).stdout  # fmt: skip
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        kinds = [d["kind"] for d in docs]
        assert ("MutatingAdmissionPolicy" in kinds) is policy, value
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OMA_CREATOR_POLICY"] == told, value
    refused = _template_refused(cluster, "--set", "approvals.creatorPolicy=maybe")
    assert refused.returncode != 0 and "/approvals/creatorPolicy" in refused.stderr


def test_the_creator_policy_on_a_cluster_without_it_stops_the_install_with_what_to_do(
    cluster: ClusterHandle,
) -> None:
    """MutatingAdmissionPolicy is GA from 1.36: before that the install would fail on an
    unknown kind; the chart says what to set instead, and installs with it."""
    old = helm(cluster, "template", "t", str(CHART), "--kube-version", "1.33.0", check=False)
    assert old.returncode != 0
    assert "approvals.creatorPolicy needs Kubernetes 1.36 or newer" in old.stderr
    assert "this cluster is v1.33.0" in old.stderr and "creatorPolicy=false" in old.stderr
    allowed = helm(
        cluster, "template", "t", str(CHART), "--kube-version", "1.33.0",
        "--set", "approvals.creatorPolicy=false",
    ).stdout  # fmt: skip
    assert "kind: Deployment" in allowed and "MutatingAdmissionPolicy" not in allowed


def test_no_rendered_document_repeats_a_key(cluster: ClusterHandle) -> None:
    """Strict YAML readers refuse a mapping with a key twice (the admission policies had two
    labels lines each)."""

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        keys = [key.value for key, _ in node.value]
        assert len(keys) == len(set(keys)), f"a key repeated in {keys}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    rendered = helm(
        cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "operator.watchAllNamespaces=true",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.load_all(rendered, Loader=Strict) if d]
    assert sum(d["kind"].endswith("AdmissionPolicy") for d in docs) == 6


def test_a_runner_account_named_in_the_values_is_used_in_every_namespace(
    cluster: ClusterHandle,
) -> None:
    """With watchAllNamespaces the default runner account exists only in the release's
    namespace, so runner pods use each namespace's default account; a name given in
    runner.serviceAccountName is used everywhere (it was silently ignored)."""

    def operator_env(*values: str) -> dict[str, str | None]:
        return _operator_env(cluster, *[a for value in values for a in ("--set", value)])

    assert operator_env()["OMA_RUNNER_SERVICE_ACCOUNT"] == "t-runner"
    assert "OMA_RUNNER_SERVICE_ACCOUNT" not in operator_env("operator.watchAllNamespaces=true")
    named = operator_env("operator.watchAllNamespaces=true", "runner.serviceAccountName=robot")
    assert named["OMA_RUNNER_SERVICE_ACCOUNT"] == "robot"


def test_operator_env_is_added_and_the_charts_own_variables_are_refused(
    cluster: ClusterHandle,
) -> None:
    env = '[{"name": "OMA_SECRET_TTL_SECONDS", "value": "5"}]'
    (deployment,) = [
        doc
        for doc in _render(cluster, json_values=f"operator.env={env}")
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "t-operator"
    ]
    variables = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "OMA_SECRET_TTL_SECONDS", "value": "5"} in variables
    assert [v["name"] for v in variables].count("OMA_SECRET_TTL_SECONDS") == 1
    for name, hint in [
        ("OMA_PROGRESS_SECONDS", "use operator.progressSeconds"),
        ("OMA_API_QPS", "use operator.apiQPS"),
        ("OMA_API_BURST", "use operator.apiBurst"),
        ("OMA_EVENTS", "use operator.events"),
        ("OMA_CREATOR_POLICY", "use approvals.creatorPolicy"),
        ("OMA_RUNNER_IMAGE", "use image.repository/image.tag"),
        ("OMA_RUNNER_IMAGE_PULL_SECRETS", "use imagePullSecrets"),
        ("OMA_MAX_RUNNING_PER_NAMESPACE", "use concurrency.perNamespace"),
        ("OMA_MAX_RUNNING_PER_PROVIDER", "use concurrency.perProvider"),
        ("OMA_LOG_FORMAT", "use logging.format"),
        ("OMA_LOG_LEVEL", "use logging.level"),
        ("OMA_TTL_SECONDS_AFTER_FINISHED", "use retention.ttlSecondsAfterFinished"),
        ("OMA_DELETE_STORE_RECORDS", "use retention.deleteStoreRecords"),
        ("OMA_RUNNER_OTLP_ENDPOINT", "use tracing.otlpEndpoint"),
        ("POD_ID", "the chart sets it"),
    ]:
        refused = _template_refused(
            cluster, "--set-json", f'operator.env=[{{"name": "{name}", "value": "1"}}]'
        )
        assert refused.returncode != 0, name
        assert f"operator.env may not set {name}: " in refused.stderr and hint in refused.stderr
    unnamed = _template_refused(
        cluster, "--set-json", 'operator.env=[{"name": "NOT A NAME", "value": "1"}]'
    )
    assert unnamed.returncode != 0 and "/operator/env/0/name" in unnamed.stderr


async def test_the_metrics_render_is_accepted_by_the_api_server(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Server-side dry run of everything but the monitors (their CRDs are not installed)."""
    docs = await asyncio.to_thread(
        _render,
        cluster,
        "metrics.enabled=true",
        "metrics.runners.enabled=true",
        "networkPolicy.enabled=true",
    )
    manifest = tmp_path / "rendered.yaml"
    kept = [{**d, "metadata": {**d["metadata"], "namespace": namespace}} for d in docs]
    kept = [
        d
        for d in kept
        if "AdmissionPolicy" not in d["kind"]  # cluster-scoped: checked by the install tests
    ]
    await asyncio.to_thread(manifest.write_text, yaml.safe_dump_all(kept))
    result = await asyncio.to_thread(
        subprocess.run,
        [cluster.tool("kubectl"), "apply", "--dry-run=server", "-f", str(manifest)],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )
    assert result.returncode == 0, result.stderr
    assert "service/t-operator-metrics created (server dry run)" in result.stdout


@pytest.mark.timeout(240)
async def test_releases_of_one_name_in_two_namespaces_and_two_in_one_namespace(
    cluster: ClusterHandle, kube: KubeClient, crds_installed: None
) -> None:
    """Every name the chart gives is its release's, or its release's and namespace's: the
    installs do not collide (before, the second failed on a cluster-scoped policy name, or
    on the runner ServiceAccount)."""
    namespaces = [f"rel-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    releases = [("oma", namespaces[0]), ("oma", namespaces[1]), ("second", namespaces[0])]
    for name in namespaces:
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    installed: list[tuple[str, str]] = []
    try:
        for release, namespace in releases:
            done = await asyncio.to_thread(
                helm, cluster, "install", release, str(CHART), "-n", namespace, "--skip-crds",
                "--set", "operator.replicas=0", "--set", "operator.uninstallHook=false",
                check=False,
            )  # fmt: skip
            assert done.returncode == 0, (release, namespace, done.stderr)
            installed.append((release, namespace))
        base = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
        for release, namespace in releases:
            policy = await kube.get(f"{base}/{release}-{namespace}-approval-decisions")
            assert policy["metadata"]["labels"]["app.kubernetes.io/instance"] == release
            account = f"/api/v1/namespaces/{namespace}/serviceaccounts/{release}-runner"
            assert (await kube.get(account))["automountServiceAccountToken"] is False
    finally:
        for release, namespace in installed:
            await asyncio.to_thread(
                helm, cluster, "uninstall", release, "-n", namespace, "--wait", check=False
            )
        for name in namespaces:
            await delete_namespace(kube, name)


def _deployment(cluster: ClusterHandle, *args: str) -> dict[str, Any]:
    rendered = helm(
        cluster, "template", "t", str(CHART), "-n", "oma", "--kube-version", KUBE_VERSION, *args
    )
    (deployment,) = [
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"
    ]
    found: dict[str, Any] = deployment
    return found


def test_leader_election_renders_a_lease_role_the_operator_s_env_and_a_rolling_update(
    cluster: ClusterHandle,
) -> None:
    deployment = _deployment(cluster, "--set", "operator.replicas=2")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["OMA_LEADER_ELECTION"] == "true"
    assert env["OMA_LEADER_ELECTION_LEASE"] == "t-operator"
    assert env["OMA_LEADER_ELECTION_NAMESPACE"] == "oma"
    assert (env["OMA_LEASE_DURATION_SECONDS"], env["OMA_LEASE_RENEW_DEADLINE_SECONDS"]) == (
        "10",
        "7",
    )
    assert env["OMA_LEASE_RETRY_PERIOD_SECONDS"] == "2"
    rendered = helm(
        cluster, "template", "t", str(CHART), "-n", "oma", "--kube-version", KUBE_VERSION
    ).stdout
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}
    role = docs[("Role", "t-operator-leader-election")]
    assert role["metadata"]["namespace"] == "oma"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    # Without it: one replica at most, Recreate, no Lease role, no election env.
    off = _deployment(cluster, "--set", "operator.leaderElection.enabled=false")
    assert off["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(
        e["name"].startswith("OMA_LEADER")
        for e in off["spec"]["template"]["spec"]["containers"][0]["env"]
    )


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            ["operator.replicas=2", "operator.leaderElection.enabled=false"],
            "needs operator.leaderElection",
        ),
        (["operator.leaderElection.renewDeadlineSeconds=10"], "renewDeadlineSeconds must be under"),
        (["operator.leaderElection.retryPeriodSeconds=6"], "retryPeriodSeconds x 1.2"),
        (
            ["operator.leaderElection.leaseDurationSeconds=1000"],
            "/operator/leaderElection/leaseDurationSeconds",
        ),
        (["operator.leaderElection.enabeld=true"], "enabeld"),
        (["operator.replicas=11"], "/operator/replicas"),
        (
            ["operator.env[0].name=OMA_LEASE_DURATION_SECONDS", "operator.env[0].value=short"],
            "may not set",
        ),
    ],
)
def test_leader_election_values_that_cannot_keep_one_leader_fail(
    cluster: ClusterHandle, values: list[str], says: str
) -> None:
    args = [a for value in values for a in ("--set", value)]
    refused = helm(
        cluster, "template", "t", str(CHART), "--kube-version", KUBE_VERSION, *args, check=False
    )
    assert refused.returncode != 0 and says in refused.stderr, refused.stderr


@pytest.mark.timeout(120)
async def test_the_chart_s_rbac_lets_its_operator_take_renew_and_release_its_lease(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    release = f"le-{uuid.uuid4().hex[:6]}"
    install = ["install", release, str(CHART), "-n", namespace, "--skip-crds"]
    install += ["--set", "operator.replicas=0", "--set", "operator.uninstallHook=false"]
    await asyncio.to_thread(helm, cluster, *install)
    account = f"{release}-operator"
    config = await token_kubeconfig(kube, cluster, namespace, account, tmp_path / "op.kubeconfig")
    client = await Kube.connect(kubeconfig=str(config))
    lost: list[str] = []
    elector = Elector(
        client,
        namespace=namespace,
        name=account,
        identity="pod-1",
        on_lost=lost.append,
        timing=Timing(),
    )
    try:
        await elector.acquire()  # creates the Lease
        await elector.renew()
        await elector.release()
        lease = await kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{account}"
        )
        assert lease["spec"]["holderIdentity"] == ""
        assert elector.leading is False and lost == []
    finally:
        await elector.aclose()
        await asyncio.to_thread(
            helm, cluster, "uninstall", release, "-n", namespace, "--no-hooks", check=False
        )
