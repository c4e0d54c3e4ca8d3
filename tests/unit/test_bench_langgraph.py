"""``bench/checkpoint_overhead.py --langgraph``, what can be checked without the network or
LangGraph's venv: the flag is off by default (no venv made, no LangGraph row, oma's table as
before), the venv's requirements are all exact pins, and LangGraph's script stays out of oma."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = ROOT / "bench" / "langgraph"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,_-]+\])?==[A-Za-z0-9.+!-]+$")


def test_every_requirement_is_an_exact_pin() -> None:
    lines = (LANGGRAPH / "requirements.txt").read_text().splitlines()
    pins = [line for line in lines if line.strip() and not line.startswith("#")]
    assert [line for line in pins if not PIN.match(line)] == []
    names = {re.split(r"[\[=]", line)[0].lower() for line in pins}
    assert {"langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres"} <= names


def test_the_langgraph_script_imports_nothing_of_oma() -> None:
    tree = ast.parse((LANGGRAPH / "amplification.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    tops = {name.split(".")[0] for name in imported}
    assert "langgraph" in tops
    assert not tops & {"oma", "oma_runner", "oma_operator", "bench", "tests"}


def test_langgraph_is_off_by_default(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "checkpoint_overhead.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--parts", "amplification", "--backends", "memory"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},  # where the venv would be made
    )
    assert done.returncode == 0, done.stderr
    assert "lg-" not in done.stdout and "LangGraph" not in done.stdout
    assert "\nbackend   layout " in done.stdout  # oma's column widths, unchanged
    assert not (tmp_path / ".cache").exists()
