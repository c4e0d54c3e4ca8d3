"""What a TeamRun adds to its runner pods (labels, annotations, priority class, a scratch
volume) and what it may not: the operator's own keys, bad names, an env name of the contract."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.settings import RunnerPodSettings
from tests.operator.pod_fixtures import BODY, SPEC


def _spec(runner: dict[str, Any]) -> TeamRunSpec:
    return TeamRunSpec.model_validate({**SPEC, "runner": runner})


def test_labels_annotations_priority_scratch_and_pull_secrets_reach_the_pod() -> None:
    spec = _spec(
        {
            "labels": {"cost-center": "research", "team.example.com/owner": "ana"},
            "annotations": {"karpenter.sh/do-not-disrupt": "true"},
            "priorityClassName": "long-runs",
            "scratch": {"sizeLimit": "512Mi"},
        }
    )
    pod = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img", image_pull_secrets=("regcred",)))
    meta, pod_spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["cost-center"] == "research"
    assert meta["labels"]["team.example.com/owner"] == "ana"
    assert meta["labels"]["oma.dev/teamrun"] == "pay"  # the operator's labels are all there
    assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert "oma.dev/start-timeout-seconds" in meta["annotations"]
    assert pod_spec["priorityClassName"] == "long-runs"
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod_spec["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "512Mi"}}]
    (container,) = pod_spec["containers"]
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert {"name": "OMA_SCRATCH_DIR", "value": "/scratch"} in container["env"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True  # still
    plain = runner_pod(BODY, _spec({}), 1, RunnerPodSettings(image="img"))["spec"]
    assert "volumes" not in plain and "priorityClassName" not in plain
    assert "imagePullSecrets" not in plain


@pytest.mark.parametrize(
    ("runner", "problem"),
    [
        ({"labels": {"oma.dev/teamrun": "someone-else"}}, "keys under oma.dev/ are the operator's"),
        ({"annotations": {"oma.dev/start-timeout-seconds": "1"}}, "are the operator's"),
        ({"labels": {"bad key!": "x"}}, "not a Kubernetes qualified name"),
        ({"labels": {"a/b/c": "x"}}, "not a Kubernetes qualified name"),
        ({"labels": {"k" * 64: "x"}}, "not a Kubernetes qualified name"),
        ({"labels": {"ok": "v" * 64}}, "at most 63 characters"),
        ({"labels": {"ok": "-starts-with-dash"}}, "pattern"),
        ({"labels": {f"k{n}": "v" for n in range(33)}}, "at most 32 items"),
        ({"priorityClassName": "Not_A_Name"}, "pattern"),
        ({"scratch": {"sizeLimit": "lots"}}, "pattern"),
        ({"scratch": {"sizeLimit": "0Gi"}}, "more than 0"),
        ({"scratch": {"medium": "HugePages"}}, "pattern"),
        ({"env": [{"name": "OMA_SCRATCH_DIR", "value": "/etc"}]}, "reserved for the runner pod"),
    ],
)
def test_what_a_teamrun_may_not_put_on_its_runner_pods(
    runner: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        _spec(runner)


def test_the_crd_refuses_the_operators_keys_before_the_operator_sees_them() -> None:
    import yaml

    from oma_operator.resources.crdgen import render

    crd = yaml.safe_load(render()["teamruns.oma.dev.yaml"])
    runner = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["runner"]["properties"]
    for field in ("labels", "annotations"):
        rules = [r["rule"] for r in runner[field]["x-kubernetes-validations"]]
        assert rules == ["self.all(k, !k.startsWith('oma.dev/'))"]
        assert runner[field]["maxProperties"] == 32
    assert runner["labels"]["additionalProperties"]["maxLength"] == 63


def test_the_operator_s_log_format_reaches_runners_unless_the_teamrun_sets_its_own() -> None:
    def env_of(spec: TeamRunSpec, log_format: str) -> list[dict[str, Any]]:
        pod = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img", log_format=log_format))
        env: list[dict[str, Any]] = pod["spec"]["containers"][0]["env"]
        return env

    plain = env_of(_spec({}), "plain")
    assert not [e for e in plain if e["name"] == "OMA_LOG_FORMAT"]  # plain is the default
    assert {"name": "OMA_RUN_TEAMRUN", "value": "pay"} in plain
    namespace = next(e for e in plain if e["name"] == "OMA_RUN_NAMESPACE")
    assert namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    json_env = env_of(_spec({}), "json")
    assert json_env[0] == {"name": "OMA_LOG_FORMAT", "value": "json"}
    # A TeamRun may ask for another format: its variable comes later, and the last one wins.
    own = env_of(_spec({"env": [{"name": "OMA_LOG_FORMAT", "value": "plain"}]}), "json")
    formats = [e["value"] for e in own if e["name"] == "OMA_LOG_FORMAT"]
    assert formats == ["json", "plain"]


def test_the_runner_s_coordinates_cannot_be_set_by_a_teamrun() -> None:
    with pytest.raises(ValidationError, match="OMA_RUN_"):
        _spec({"env": [{"name": "OMA_RUN_TEAMRUN", "value": "someone-else"}]})


def test_an_unknown_log_format_for_the_runner_is_refused_with_the_spec() -> None:
    with pytest.raises(ValidationError, match="OMA_LOG_FORMAT='xml': use one of plain, json"):
        _spec({"env": [{"name": "OMA_LOG_FORMAT", "value": "xml"}]})
    assert _spec({"env": [{"name": "OMA_LOG_FORMAT", "value": "json"}]}).runner.env


def test_the_chart_s_otlp_endpoint_reaches_runners_unless_the_teamrun_sets_its_own() -> None:
    def endpoints(spec: TeamRunSpec, chart: str) -> list[str]:
        pod = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img", otlp_endpoint=chart))
        env: list[dict[str, Any]] = pod["spec"]["containers"][0]["env"]
        return [e["value"] for e in env if e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"]

    assert endpoints(_spec({}), "") == []  # no traces unless asked
    assert endpoints(_spec({}), "http://collector:4318") == ["http://collector:4318"]
    own = _spec({"env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://mine:4318"}]})
    # The TeamRun's entry comes later: for a name set twice the last one wins.
    assert endpoints(own, "http://collector:4318") == ["http://collector:4318", "http://mine:4318"]
