"""Run specs: any YAML/JSON document is a ``RunSpec`` or a typed, one-line spec error."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from oma.cli.run import load_spec
from oma.errors import OmaError
from oma.spec import RunSpec, RunSpecError, load_run_spec
from oma_runner.config import RunnerConfig, RunnerConfigError
from tests.fuzz.strategies import any_json_scalars, edge_text, json_values, mutated
from tests.fuzz.tally import assert_code, examples, record

REPO = Path(__file__).resolve().parents[2]
SEED_SPECS: list[dict[str, Any]] = [
    {
        "runId": "fuzz",
        "agents": [
            {"name": "w", "model": {"provider": "scripted", "script": [{"text": "done"}]}},
            {"name": "x", "model": {"provider": "openai", "name": "gpt", "baseURL": "http://h"}},
        ],
        "tasks": [
            {"title": "T", "description": "d", "assignee": "w", "dependsOn": []},
            {"title": "U", "description": "e", "dependsOn": ["T"], "maxRetries": 1},
        ],
        "store": {"file": {"path": "/tmp/x.json"}},
        "approvals": {"tools": ["*"], "dispatch": [], "plan": False},
        "maxConcurrency": 2,
    },
    {
        "mode": "plan",
        "agents": [{"name": "w", "model": {"provider": "scripted", "script": {"*": []}}}],
        "plan": {"version": 1, "tasks": [{"id": "a", "title": "A", "description": "d"}]},
        "store": {"redis": {"urlEnv": "REDIS_URL"}},
    },
    {
        "mode": "team",
        "goal": "g",
        "agents": [{"name": "w", "model": {"provider": "anthropic", "name": "claude"}}],
        "coordinator": {"name": "c", "model": {"provider": "scripted", "script": []}},
        "store": {"postgres": {"dsnEnv": "PG", "table": "t"}},
    },
]


def _seed(index: int) -> dict[str, Any]:
    return copy.deepcopy(SEED_SPECS[index % len(SEED_SPECS)])


def _names_problems(error: ValidationError) -> None:
    assert error.errors(), "a validation error names its problems"


def _one_line(error: Exception) -> None:
    assert "\n" not in str(error), "spec errors are one line (the CLI prints them as is)"


def _validate(doc: Any, target: str) -> None:
    try:
        RunSpec.model_validate(doc)
    except ValidationError as error:
        _names_problems(error)
        record(target, "typed")
        return
    record(target, "valid")


def test_seed_specs_are_valid() -> None:
    for index in range(len(SEED_SPECS)):
        RunSpec.model_validate(_seed(index))


@settings(max_examples=examples(250))
@given(index=st.integers(0, 100), change=st.data())
def test_mutated_spec_is_valid_or_a_validation_error(index: int, change: st.DataObject) -> None:
    doc, _ = change.draw(mutated(_seed(index)))
    _validate(doc, "spec: mutated document")


@settings(max_examples=examples(100))
@given(doc=json_values(10, scalars=any_json_scalars))
def test_arbitrary_document_is_valid_or_a_validation_error(doc: Any) -> None:
    _validate(doc, "spec: arbitrary document")


# What a spec file may hold: YAML or JSON of a (mutated) spec, truncated, or plain garbage.
@st.composite
def spec_files(draw: st.DrawFn) -> bytes:
    doc, _ = draw(mutated(_seed(draw(st.integers(0, 100)))))
    as_yaml = draw(st.booleans())
    text = yaml.safe_dump(doc, allow_unicode=True) if as_yaml else json.dumps(doc)
    kind = draw(st.sampled_from(["whole", "truncated", "garbage", "bytes"]))
    if kind == "truncated":
        text = text[: draw(st.integers(0, len(text)))]
    elif kind == "garbage":
        text = draw(edge_text)
    elif kind == "bytes":
        return draw(st.binary(max_size=200))
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=examples(200))
@given(data=spec_files())
def test_spec_text_is_a_spec_or_a_run_spec_error(data: bytes) -> None:
    try:
        spec = load_run_spec(data, "fuzz.yaml")
    except RunSpecError as error:
        assert_code(error, {"RUN_SPEC_INVALID"})
        _one_line(error)
        record("spec: load_run_spec text", "typed")
        return
    assert isinstance(spec, RunSpec)
    record("spec: load_run_spec text", "valid")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"agents: \xff\xfe", id="not-utf8"),
        pytest.param(b"[" * 5000 + b"]" * 5000, id="deep-flow"),
        pytest.param(b"maxConcurrency: " + b"9" * 5000, id="huge-int"),
    ],
)
def test_hostile_spec_text_is_a_run_spec_error(data: bytes) -> None:
    with pytest.raises(RunSpecError):
        load_run_spec(data, "fuzz.yaml")


@settings(max_examples=examples(40))
@given(data=spec_files().filter(lambda d: _is_utf8(d) and b"[" * 50 not in d))
def test_oma_run_loader_gives_a_spec_or_an_oma_error(data: bytes) -> None:
    """``oma run FILE`` on arbitrary UTF-8 documents (hostile bytes: the test below)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "spec.yaml"
        path.write_bytes(data)
        try:
            load_spec(path)
        except OmaError:
            record("spec: oma run loader", "typed")
            return
    record("spec: oma run loader", "valid")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"agents: \xff\xfe", id="not-utf8"),
        pytest.param(b"[" * 5000 + b"]" * 5000, id="deep-flow"),
        pytest.param(b"maxConcurrency: " + b"9" * 5000, id="huge-int"),
    ],
)
def test_oma_run_loader_on_hostile_files(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(data)
    with pytest.raises(OmaError):
        load_spec(path)


@settings(max_examples=examples(60))
@given(doc=st.data())
def test_runner_spec_from_env_is_config_or_config_error(doc: st.DataObject) -> None:
    spec, _ = doc.draw(mutated(_seed(doc.draw(st.integers(0, 100)))))
    env = {"OMA_RUN_SPEC": json.dumps(spec), "OMA_RUN_ID": "r"}
    try:
        RunnerConfig.from_env(env)
    except RunnerConfigError:
        record("spec: runner OMA_RUN_SPEC", "typed")
        return
    record("spec: runner OMA_RUN_SPEC", "valid")


def test_runner_spec_nested_past_the_parser_limit_is_a_config_error() -> None:
    with pytest.raises(RunnerConfigError):
        RunnerConfig.from_env({"OMA_RUN_SPEC": "[" * 100_000 + "]" * 100_000})
