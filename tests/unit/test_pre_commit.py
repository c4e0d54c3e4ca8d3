"""The pre-commit hooks are the checks ``hack/test`` runs before its tests, in the same order, so
a commit that passes them passes that part of CI (``.pre-commit-config.yaml``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _checks_in_hack_test() -> list[str]:
    """The commands between hack/test's ``ruff`` step and its first pytest."""
    lines = (REPO / "hack" / "test").read_text().splitlines()
    start = lines.index('step "ruff"')
    found = []
    for line in lines[start:]:
        text = line.strip()
        if text.startswith("#"):
            break
        if text and not text.startswith("step "):
            found.append(text)
    return found


def test_the_hooks_are_hack_tests_checks_in_its_order() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "local"
    entries = []
    for hook in repo["hooks"]:
        assert hook["language"] == "system" and hook["pass_filenames"] is False, hook
        program, *args = shlex.split(hook["entry"])
        assert program.startswith(".venv/bin/"), hook  # the versions pyproject.toml pins
        entries.append(shlex.join([program.removeprefix(".venv/bin/"), *args]))
    checks = _checks_in_hack_test()
    assert checks == ["ruff check .", "ruff format --check .", "mypy", "lint-imports"]
    assert entries == checks
