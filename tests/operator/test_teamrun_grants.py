"""What a TeamRun hands to its runner pod (pure): the contract's names are the operator's,
the store is the namespace's part, and the spec is checked by the run spec's own rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from oma.pod_contract import (
    RESERVED_ENV,
    TerminationReport,
    is_reserved_env,
)
from oma.spec import RunSpec
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import EnvVar, TeamRunSpec, to_run_spec
from oma_operator.resources.specs import TeamRunSpecError, spec_of
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.settings import RunnerPodSettings

SPEC: dict[str, Any] = {
    "runId": "pay-1",
    "team": {"agents": [{"name": "clerk", "model": {"provider": "scripted", "script": []}}]},
    "tasks": [{"title": "Pay", "description": "Pay.", "assignee": "clerk"}],
    "store": {"redis": {"urlSecretRef": {"name": "store", "key": "url"}}},
}
BODY: TeamRunBody = {"metadata": {"name": "pay", "namespace": "team-a", "uid": "u-1"}, "spec": SPEC}


@pytest.mark.parametrize(
    "name",
    [
        *sorted(RESERVED_ENV),
        "OMA_MODEL_KEY_CLERK",
        "OMA_RUN_ANYTHING",
        "OMA_STORE_PASSWORD",
    ],
)
def test_the_runner_contract_names_are_refused_in_runner_env(name: str) -> None:
    assert is_reserved_env(name)
    spec = {**SPEC, "runner": {"env": [{"name": name, "value": "mine"}]}}
    with pytest.raises(ValidationError, match="reserved for the runner pod contract"):
        TeamRunSpec.model_validate(spec)


def test_tool_settings_and_other_names_are_the_authors() -> None:
    env = [
        {"name": "OMA_LEDGER_URL", "value": "redis://ledger"},
        {"name": "PYTHONPATH", "value": "/tools"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}},
    ]
    spec = TeamRunSpec.model_validate({**SPEC, "runner": {"env": env}})
    pod = runner_pod(BODY, spec, 1, RunnerPodSettings(image="img"))
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names[:3] == ["OMA_LEDGER_URL", "PYTHONPATH", "TOKEN"]


def test_the_operators_values_come_last_whatever_the_spec_says() -> None:
    """Even a spec that got past validation (a forged object) cannot set the contract: in a
    container's env the last of two equal names wins, and the operator's are last."""
    spec = TeamRunSpec.model_validate(SPEC)
    forged = spec.model_copy(deep=True)
    forged.runner.env = [EnvVar.model_construct(name="OMA_RUN_SPEC", value="{}")]
    env = runner_pod(BODY, forged, 1, RunnerPodSettings(image="img"))["spec"]["containers"][0][
        "env"
    ]
    last = {e["name"]: e for e in env}
    assert last["OMA_RUN_SPEC"]["value"] != "{}"
    names = [e["name"] for e in env]
    assert names.count("OMA_RUN_SPEC") == 2 and names.index("OMA_RUN_SPEC") == 0


def test_the_pod_spec_carries_no_run_id_and_the_namespaces_part_of_the_store() -> None:
    spec = TeamRunSpec.model_validate(SPEC)
    env = {
        e["name"]: e
        for e in runner_pod(BODY, spec, 2, RunnerPodSettings(image="img"))["spec"]["containers"][0][
            "env"
        ]
    }
    run = RunSpec.model_validate(json.loads(env["OMA_RUN_SPEC"]["value"]))
    assert run.run_id is None and env["OMA_RUN_ID"]["value"] == "pay-1"
    assert run.store is not None and run.store.tenant == "team-a"
    assert to_run_spec(spec, "team-b")["store"]["tenant"] == "team-b"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"team": {"agents": [SPEC["team"]["agents"][0]] * 2}}, "agent names must be unique"),
        ({"goal": "also this"}, "does not take 'goal'"),
        ({"tasks": [{"title": "T", "description": "d", "assignee": "ghost"}]}, "unknown agent"),
        ({"sharedMemoryScope": "team"}, "sharedMemoryScope needs sharedMemory"),
    ],
)
def test_the_run_specs_own_rules_hold_for_a_teamrun(change: dict[str, Any], problem: str) -> None:
    body: TeamRunBody = {
        "metadata": {"name": "x", "namespace": "n", "uid": "u", "generation": 1},
        "spec": {**SPEC, **change},
    }
    with pytest.raises(TeamRunSpecError, match=problem):
        spec_of(body)


def test_a_spec_is_parsed_once_per_generation() -> None:
    body: TeamRunBody = {
        "metadata": {"name": "x", "namespace": "n", "uid": "u-once", "generation": 1},
        "spec": SPEC,
    }
    first = spec_of(body)
    assert spec_of(body) is first
    changed: TeamRunBody = {**body, "metadata": {**body["metadata"], "generation": 2}}
    assert spec_of(changed) is not first


def test_the_termination_report_parses_once_and_fits_kubernetes() -> None:
    report = TerminationReport(run_id="r", status="suspended", pending_approvals=["a" * 40] * 200)
    text = report.to_text()
    assert len(text.encode()) <= 4096
    parsed = TerminationReport.parse(text)
    assert parsed is not None and parsed.truncated and parsed.status == "suspended"
    assert 0 < len(parsed.pending_approvals) < 200
    for junk in ("", "not json", "[]", "Error: exec format error"):
        assert TerminationReport.parse(junk) is None
