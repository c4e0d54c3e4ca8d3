"""A TeamRun whose run spec is too large for one environment string still starts its runner."""

from __future__ import annotations

import base64

import pytest

from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.settings import RunnerPodSettings
from oma_runner.config import RunnerConfig, RunnerConfigError

BODY: TeamRunBody = {"metadata": {"name": "big", "namespace": "ns", "uid": "u"}, "spec": {}}


def _spec(turns: int) -> TeamRunSpec:
    script = [{"text": f"turn {n}: " + "lorem ipsum dolor sit amet " * 20} for n in range(turns)]
    return TeamRunSpec.model_validate(
        {
            "team": {
                "agents": [{"name": "a", "model": {"provider": "scripted", "script": script}}]
            },
            "tasks": [{"title": "t", "description": "d"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
        }
    )


def _env(spec: TeamRunSpec) -> dict[str, str]:
    container = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img"))["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return {**env, "OMA_STORE_URL": "redis://localhost"}


def test_a_small_spec_travels_as_json() -> None:
    env = _env(_spec(3))
    assert "OMA_RUN_SPEC" in env and "OMA_RUN_SPEC_GZIP" not in env


def test_a_spec_over_128_kib_is_gzipped_and_read_back_unchanged() -> None:
    spec = _spec(400)  # about 230 KB of JSON: over Linux's 128 KiB per environment string
    env = _env(spec)
    assert "OMA_RUN_SPEC" not in env
    assert len(env["OMA_RUN_SPEC_GZIP"]) < 128 * 1024
    config = RunnerConfig.from_env(env)
    agent = config.spec.agents[0]
    assert agent.model.script == spec.team.agents[0].model.script


@pytest.mark.parametrize("value", ["not base64!", base64.b64encode(b"not gzip").decode()])
def test_a_damaged_gzipped_spec_is_a_config_error(value: str) -> None:
    with pytest.raises(RunnerConfigError, match="OMA_RUN_SPEC_GZIP"):
        RunnerConfig.from_env({"OMA_RUN_SPEC_GZIP": value, "OMA_RUN_ID": "r"})


def test_kopf_keeps_no_copy_of_a_large_approval_s_content() -> None:
    """kopf's last-handled copy of an ApprovalDecision (for its ``spec.decision`` handler)
    leaves the content and summary out, so it stays far under the annotation limit whatever
    content oma accepts (a 125 KB tool input made it too long)."""
    import json

    import kopf

    from oma_operator.handlers import DIFFBASE

    body = kopf.Body(
        {
            "apiVersion": "oma.dev/v1alpha1",
            "kind": "ApprovalDecision",
            "metadata": {"name": "d", "namespace": "ns", "annotations": {}},
            "spec": {
                "teamRun": "r",
                "requestId": "apr_1",
                "requestHash": "h" * 64,
                "summary": "s" * 100_000,
                "content": "c" * 400_000,
                "decision": "Pending",
            },
        }
    )
    kept = DIFFBASE.build(body=body)
    assert kept["spec"]["decision"] == "Pending" and kept["spec"]["requestId"] == "apr_1"
    assert "content" not in kept["spec"] and "summary" not in kept["spec"]
    assert len(json.dumps(kept)) < 4096
