"""The operator's Prometheus series: registered with their labels, fed by what handlers see,
and served in the text exposition format (docs/metrics.md lists every one)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from oma.pod_contract import TerminationReport
from oma_operator.main import _port
from oma_operator.resources.bodies import DecisionBody, DecisionStatus, PodBody, TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.resources.phases import Phase
from oma_operator.runs.metrics import OperatorMetrics, Resume, pod_ended_at, serve
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.settings import RunnerPodSettings
from tests.operator.pod_fixtures import BODY, SPEC
from tests.servers.process import free_port

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> OperatorMetrics:
    return OperatorMetrics(registry)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


def test_every_series_exists_at_zero_with_its_labels(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    for phase in ("Pending", "Running", "AwaitingApproval", "Succeeded", "Failed", "Rejected"):
        assert value(registry, "oma_teamruns", phase=phase) == 0
    for outcome in ("succeeded", "suspended", "fenced", "permanent", "disruption", "oom", "crash"):
        assert value(registry, "oma_attempts_total", outcome=outcome) == 0
    for after in ("disruption", "oom", "crash", "suspended"):
        assert value(registry, "oma_resume_latency_seconds_count", after=after) == 0
    for decision in ("approved", "rejected"):
        assert value(registry, "oma_approval_wait_seconds_count", decision=decision) == 0
    for source in ("executed", "replayed"):
        assert value(registry, "oma_reported_tool_calls_total", source=source) == 0
    for name in ("saves", "save_seconds", "save_failures"):
        assert value(registry, f"oma_reported_checkpoint_{name}_total") == 0


def _teamrun(uid: str, phase: Phase | None) -> TeamRunBody:
    return {"metadata": {"uid": uid}, "status": {"phase": phase} if phase else {}}


def test_teamruns_by_phase_follow_the_watch(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    metrics.teamrun_seen(_teamrun("a", None), None)  # listed at startup, no status yet
    metrics.teamrun_seen(_teamrun("b", "Running"), "ADDED")
    metrics.teamrun_seen(_teamrun("c", "Running"), "ADDED")
    assert value(registry, "oma_teamruns", phase="Pending") == 1
    assert value(registry, "oma_teamruns", phase="Running") == 2
    metrics.teamrun_seen(_teamrun("b", "Succeeded"), "MODIFIED")
    metrics.teamrun_seen(_teamrun("c", "Running"), "DELETED")
    assert value(registry, "oma_teamruns", phase="Running") == 0
    assert value(registry, "oma_teamruns", phase="Succeeded") == 1
    # Repeated events (kopf's own patches) count once; a deletion of one never seen changes none.
    for _ in range(3):
        metrics.teamrun_seen(_teamrun("d", "Queued"), "MODIFIED")
    metrics.teamrun_seen(_teamrun("zz", "Running"), "DELETED")
    assert value(registry, "oma_teamruns", phase="Queued") == 1
    metrics.teamrun_seen(_teamrun("d", "Running"), "MODIFIED")
    assert value(registry, "oma_teamruns", phase="Queued") == 0
    assert value(registry, "oma_teamruns", phase="Running") == 1
    assert value(registry, "oma_teamruns", phase="Pending") == 1


def test_attempts_by_outcome(metrics: OperatorMetrics, registry: CollectorRegistry) -> None:
    metrics.attempt_ended("disruption")
    metrics.attempt_ended("disruption")
    metrics.attempt_ended("succeeded")
    assert value(registry, "oma_attempts_total", outcome="disruption") == 2
    assert value(registry, "oma_attempts_total", outcome="succeeded") == 1


def test_resume_latency_from_the_pod_end(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    metrics.resumed(Resume("disruption", T0), now=T0 + timedelta(seconds=1.5))
    metrics.resumed(Resume("crash", T0), now=T0 - timedelta(seconds=1))  # clock skew: 0, not <0
    labels = {"after": "disruption"}
    assert value(registry, "oma_resume_latency_seconds_count", **labels) == 1
    assert value(registry, "oma_resume_latency_seconds_sum", **labels) == 1.5
    assert value(registry, "oma_resume_latency_seconds_bucket", le="2.0", **labels) == 1
    assert value(registry, "oma_resume_latency_seconds_bucket", le="1.0", **labels) == 0
    assert value(registry, "oma_resume_latency_seconds_sum", after="crash") == 0


def test_pod_end_is_the_containers_finish_time() -> None:
    pod: PodBody = {
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 11, "finishedAt": "2026-03-01T12:00:00Z"}}}
            ]
        }
    }
    assert pod_ended_at(pod) == T0
    assert pod_ended_at({"status": {"phase": "Failed"}}) is None


def _decision(uid: str, recorded: bool, decision: str = "approved") -> DecisionBody:
    status: DecisionStatus = {
        "recorded": True,
        "decision": decision,
        "decidedAt": "2026-03-01T12:05:00.000Z",
    }
    return {
        "metadata": {"uid": uid, "creationTimestamp": "2026-03-01T12:00:00Z"},
        "spec": {"decision": "Pending"},
        "status": status if recorded else {},
    }


def test_approval_wait_is_observed_once_when_a_decision_is_recorded(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    metrics.decision_seen(_decision("old", True), None)  # decided before this operator started
    metrics.decision_seen(_decision("d", False), "ADDED")
    metrics.decision_seen(_decision("d", True), "MODIFIED")
    metrics.decision_seen(_decision("d", True), "MODIFIED")  # a later status write: not again
    metrics.decision_seen(_decision("r", False), "ADDED")
    metrics.decision_seen(_decision("r", True, "rejected"), "MODIFIED")
    assert value(registry, "oma_approval_wait_seconds_count", decision="approved") == 1
    assert value(registry, "oma_approval_wait_seconds_sum", decision="approved") == 300
    assert value(registry, "oma_approval_wait_seconds_count", decision="rejected") == 1


def test_runner_reports_are_added_and_bad_ones_ignored(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    report = {
        "status": "ok",
        "metrics": {
            "saves": 4,
            "saveSeconds": 0.25,
            "saveFailures": 1,
            "toolCalls": {"executed": 2, "replayed": 1},
            "modelCalls": 3,
            "modelSeconds": 4.5,
            "tokens": {"input": 1200, "output": 300},
        },
    }
    metrics.runner_report(TerminationReport.parse(json.dumps(report)))
    metrics.runner_report(TerminationReport.parse(json.dumps(report)))
    for junk in ("", "not json", "[]", '{"metrics": 3}', '{"metrics": {"saves": -1}}'):
        metrics.runner_report(TerminationReport.parse(junk))
    metrics.runner_report(TerminationReport.parse('{"metrics": {"saves": "7", "toolCalls": []}}'))
    assert value(registry, "oma_reported_tool_calls_total", source="executed") == 4
    assert value(registry, "oma_reported_tool_calls_total", source="replayed") == 2
    assert value(registry, "oma_reported_checkpoint_saves_total") == 8
    assert value(registry, "oma_reported_checkpoint_save_seconds_total") == 0.5
    assert value(registry, "oma_reported_checkpoint_save_failures_total") == 2
    assert value(registry, "oma_reported_model_calls_total") == 6
    assert value(registry, "oma_reported_model_call_seconds_total") == 9.0
    assert value(registry, "oma_reported_tokens_total", direction="input") == 2400
    assert value(registry, "oma_reported_tokens_total", direction="output") == 600


def test_the_endpoint_serves_the_text_format(
    metrics: OperatorMetrics, registry: CollectorRegistry
) -> None:
    metrics.attempt_ended("oom")
    port = free_port()
    stop = serve(port, "127.0.0.1", registry)
    assert stop is not None
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert 'oma_attempts_total{outcome="oom"} 1.0' in response.text
        assert "# TYPE oma_resume_latency_seconds histogram" in response.text
        # A second server on the same port is refused and logged, not raised.
        assert serve(port, "127.0.0.1", CollectorRegistry()) is None
    finally:
        stop()
    assert serve(0, "127.0.0.1", registry) is None


def test_runner_pods_get_a_metrics_port_only_when_asked() -> None:
    spec = TeamRunSpec.model_validate(SPEC)
    plain = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img"))
    assert not any(k.startswith("prometheus.io/") for k in plain["metadata"]["annotations"])
    assert "ports" not in plain["spec"]["containers"][0]
    assert "OMA_METRICS_PORT" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    pod = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img", metrics_port=9100))
    (container,) = pod["spec"]["containers"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    names = [e["name"] for e in container["env"]]
    # The port is the operator's (a contract name): it comes after the TeamRun's own env.
    assert names.index("OMA_METRICS_PORT") > names.index("X")
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9100"
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_port_flags_are_checked() -> None:
    assert _port("0") == 0 and _port("8000") == 8000
    for bad in ("x", "-1", "70000"):
        with pytest.raises(argparse.ArgumentTypeError):
            _port(bad)


def test_the_engine_never_imports_prometheus_client() -> None:
    """Metrics live in the operator and the runner; the engine only emits progress events."""
    engine = Path(__file__).resolve().parents[2] / "src" / "oma"
    offenders = [
        str(path.relative_to(engine))
        for path in engine.rglob("*.py")
        if "import prometheus_client" in path.read_text(encoding="utf-8")
        or "from prometheus_client" in path.read_text(encoding="utf-8")
    ]  # (oma.extras names the package, to say which extra installs it)
    assert offenders == []
