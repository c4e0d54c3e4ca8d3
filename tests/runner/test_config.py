"""The runner's inputs (oma.pod_contract): one run id, one attempt, clear errors."""

from __future__ import annotations

import json

import pytest

from oma_runner.config import RunnerConfig, RunnerConfigError

SPEC = {
    "agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}],
    "tasks": [{"title": "T", "description": "d"}],
    "store": {"redis": {"urlEnv": "OMA_STORE_URL"}},
}


def test_the_run_id_comes_from_the_pod() -> None:
    config = RunnerConfig.from_env({"OMA_RUN_SPEC": json.dumps(SPEC), "OMA_RUN_ID": "r-1"})
    assert (config.run_id, config.attempt) == ("r-1", 1)


def test_two_different_run_ids_are_refused() -> None:
    env = {"OMA_RUN_SPEC": json.dumps({**SPEC, "runId": "other"}), "OMA_RUN_ID": "r-1"}
    with pytest.raises(RunnerConfigError, match="differ: give one"):
        RunnerConfig.from_env(env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no run spec"),
        ({"OMA_RUN_SPEC": json.dumps(SPEC)}, "no run id"),
        ({"OMA_RUN_SPEC": json.dumps(SPEC), "OMA_RUN_ID": "r", "OMA_ATTEMPT": "x"}, "not a number"),
    ],
)
def test_missing_or_bad_inputs_say_which(env: dict[str, str], message: str) -> None:
    with pytest.raises(RunnerConfigError, match=message):
        RunnerConfig.from_env(env)
