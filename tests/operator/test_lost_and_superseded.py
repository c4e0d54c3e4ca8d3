"""An attempt that cannot go on ends the TeamRun with a condition that says why (pure): its
checkpoint was lost (exit 13), or another writer replaced it and no newer attempt of ours
exists; and an attempt after one that saved a checkpoint is told to expect it."""

from __future__ import annotations

import json
from typing import Any

from oma.pod_contract import EXPECT_CHECKPOINT_ENV, TerminationReport
from oma_operator.resources.bodies import TeamRunBody, TeamRunStatus
from oma_operator.resources.models import RetryPolicy, TeamRunSpec
from oma_operator.runs.rules.decisions import decide
from oma_operator.runs.rules.outcomes import Outcome, classify
from oma_operator.runs.rules.pods import checkpoint_expected, runner_pod
from oma_operator.settings import RunnerPodSettings
from oma_runner.config import RunnerConfig
from tests.operator.pod_fixtures import runner_pod_in

POLICY = RetryPolicy()
SPEC: dict[str, Any] = {
    "runId": "pay-1",
    "team": {"agents": [{"name": "clerk", "model": {"provider": "scripted", "script": []}}]},
    "tasks": [{"title": "Pay", "description": "Pay.", "assignee": "clerk"}],
    "store": {"redis": {"urlSecretRef": {"name": "store", "key": "url"}}},
}


def test_exit_13_ends_the_run_checkpoint_lost_with_the_runners_message() -> None:
    report = TerminationReport(status="checkpoint_lost", message="checkpoint ... is missing")
    outcome = classify(runner_pod_in("Failed", exit_code=13, message=report.to_text()))
    assert (outcome.kind, outcome.reason) == ("permanent", "CheckpointLost")
    decision = decide(outcome, {"attempt": 2}, POLICY, 2)
    assert (decision.action, decision.reason) == ("failed", "CheckpointLost")
    assert decision.message == "checkpoint ... is missing"


def test_fenced_with_a_newer_attempt_of_ours_waits_for_it() -> None:
    decision = decide(Outcome("fenced", "Fenced", "", 12), {"attempt": 3}, POLICY, 2)
    assert decision.action == "fenced"


def test_fenced_without_a_successor_is_terminal_and_says_what_to_do() -> None:
    decision = decide(Outcome("fenced", "Fenced", "", 12), {"attempt": 2}, POLICY, 2)
    assert (decision.action, decision.reason) == ("failed", "Superseded")
    assert "no newer attempt of this TeamRun exists" in decision.message
    assert "oma checkpoint show" in decision.message


def _env(status: TeamRunStatus) -> dict[str, Any]:
    body: TeamRunBody = {"metadata": {"name": "pay", "namespace": "a", "uid": "u"}, "spec": SPEC}
    pod = runner_pod(
        {**body, "status": status},
        TeamRunSpec.model_validate(SPEC),
        2,
        RunnerPodSettings(image="img"),
    )
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_an_attempt_after_a_saved_checkpoint_is_told_to_expect_it() -> None:
    assert EXPECT_CHECKPOINT_ENV not in _env({})
    assert _env({"lastCheckpointAt": "2026-12-02T10:00:00.000Z"})[EXPECT_CHECKPOINT_ENV] == "1"
    assert _env({"checkpointSaved": True})[EXPECT_CHECKPOINT_ENV] == "1"
    assert not checkpoint_expected({"attempt": 4})  # attempts alone prove nothing was saved


def test_the_runner_reads_the_expectation() -> None:
    spec = {
        "agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}],
        "tasks": [],
        "store": {"file": {"path": "/tmp/s.json"}},
    }
    env = {"OMA_RUN_SPEC": json.dumps(spec), "OMA_RUN_ID": "r"}
    assert not RunnerConfig.from_env(env).expect_checkpoint
    assert RunnerConfig.from_env({**env, EXPECT_CHECKPOINT_ENV: "1"}).expect_checkpoint


def test_a_teamrun_name_too_long_for_its_pods_is_an_invalid_spec() -> None:
    import pytest

    from oma_operator.resources.specs import TeamRunSpecError, spec_of

    long: TeamRunBody = {
        "metadata": {"name": "n" * 53, "namespace": "a", "uid": "u-long"},
        "spec": SPEC,
    }
    with pytest.raises(TeamRunSpecError, match="at most 52"):
        spec_of(long)
    assert spec_of({**long, "metadata": {**long["metadata"], "name": "n" * 52}}) is not None
