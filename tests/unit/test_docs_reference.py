"""docs/reference/ is exactly what hack/gen-reference generates from the models and the chart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gen_reference

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"
STALE = "docs/reference/{name} is stale: run hack/gen-reference"


def test_committed_reference_matches_a_fresh_generation(tmp_path: Path) -> None:
    assert gen_reference.main([str(tmp_path)]) == 0
    generated = {path.name: path.read_text(encoding="utf-8") for path in tmp_path.iterdir()}
    committed = {path.name: path.read_text(encoding="utf-8") for path in REFERENCE.glob("*.md")}
    assert sorted(committed) == sorted(generated), (
        f"docs/reference holds {sorted(committed)}, the generator writes {sorted(generated)}: "
        "run hack/gen-reference (and delete pages it no longer writes)"
    )
    for name, text in generated.items():
        assert committed[name] == text, STALE.format(name=name)


def test_every_model_field_and_helm_value_is_listed() -> None:
    pages = gen_reference.render()
    teamrun, runspec, values = pages["teamrun.md"], pages["run-spec.md"], pages["helm-values.md"]
    for path in (
        "spec.team.agents[].model.apiKeySecretRef.key",
        "spec.retryPolicy.maxOomKills",
        "spec.runner.terminationGracePeriodSeconds",
        "status.conditions[].lastTransitionTime",
    ):
        assert f"| `{path}` |" in teamrun
    assert "| `spec.retryPolicy.backoffSeconds` | integer | default `10` | 0–3600 |" in teamrun
    assert "| `store.postgres.schema` |" in runspec and "| `plan.tasks[].id` |" in runspec
    assert "| `agents[].tools` | array of string | default `[]` |" in runspec
    assert (
        "| `operator.replicas` | integer | `1` | 0–10 | "
        "0 leaves the RBAC in place without running the operator; 2 or more need leaderElection |"
    ) in values
    assert "runnerEgress` | array | `[]` |  | Where runner pods may connect" in values


def test_values_comments_take_the_lines_above_and_the_inline_comment() -> None:
    text = (
        "# top\n"
        "a:\n"
        "  # above b\n"
        "  # second line\n"
        '  b: "x # not a comment"   # inline\n'
        "\n"
        "  # dropped by the blank line\n"
        "\n"
        "  c: 1\n"
        "d: 2 # only inline\n"
    )
    assert gen_reference.values_comments(text) == {
        "a": "top",
        "a.b": "above b second line inline",
        "a.c": "",
        "d": "only inline",
    }


@pytest.mark.timeout(60)
def test_the_wrapper_script_writes_the_pages(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(REPO / "hack" / "gen-reference"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(gen_reference.render())
