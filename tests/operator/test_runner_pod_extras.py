"""What a TeamRun adds to its runner pods (labels, annotations, priority class, a scratch
volume) and what it may not: the operator's own keys, bad names, an env name of the contract."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from oma_operator.models import TeamRunSpec
from oma_operator.pods import runner_pod
from tests.operator.test_outcomes_and_decisions import BODY, SPEC


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
    pod = runner_pod(BODY, spec, 1, "img", image_pull_secrets=("regcred",))
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
    plain = runner_pod(BODY, _spec({}), 1, "img")["spec"]
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

    from oma_operator.crdgen import render

    crd = yaml.safe_load(render()["teamruns.oma.dev.yaml"])
    runner = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["runner"]["properties"]
    for field in ("labels", "annotations"):
        rules = [r["rule"] for r in runner[field]["x-kubernetes-validations"]]
        assert rules == ["self.all(k, !k.startsWith('oma.dev/'))"]
        assert runner[field]["maxProperties"] == 32
    assert runner["labels"]["additionalProperties"]["maxLength"] == 63
