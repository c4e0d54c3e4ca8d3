"""Tools from installed packages: the runner loads the ``oma.tools`` entry-point group.

Each test writes a real distribution (a module and its ``*.dist-info`` with
``entry_points.txt``) into a directory, puts it on the runner's PYTHONPATH and starts
``oma-runner`` as a pod would (env in, exit code and termination message out).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cluster.helpers import tool_package, with_pythonpath

MODULE = '''
"""Tools of a third-party package (written by tests/runner/test_tool_entry_points.py)."""

import json
import os

from pydantic import BaseModel

from oma.tools import define_tool


class StampInput(BaseModel):
    note: str


async def _stamp(args, ctx):
    with open(os.environ["STAMP_PATH"], "a", encoding="utf-8") as out:
        record = {"tool": "stamp", "note": args.note, "call": ctx.tool_call_id, "run": ctx.run_id}
        out.write(json.dumps(record) + "\\n")
    return "stamped " + args.note


async def _shout(args, ctx):
    with open(os.environ["STAMP_PATH"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": "shout", "note": args.note.upper()}) + "\\n")
    return args.note.upper()


stamp = define_tool("stamp", "Write a stamp line.", StampInput, _stamp)


def more_tools():
    return [define_tool("shout", "Write the note in capitals.", StampInput, _shout)]


def not_tools():
    return ["just a string"]
'''


def _package(tmp_path: Path, entry_points: dict[str, str]) -> Path:
    return tool_package(tmp_path / "site", "oma_test_tools", MODULE, entry_points)


def _spec(tmp_path: Path, tools: list[str], script: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "agents": [
            {"name": "w", "tools": tools, "model": {"provider": "scripted", "script": script}}
        ],
        "tasks": [{"title": "Stamp", "description": "Stamp.", "assignee": "w"}],
        "store": {"file": {"path": str(tmp_path / "store.json")}},
    }


def _run(tmp_path: Path, site: Path, spec: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": with_pythonpath(site),
        "OMA_RUN_SPEC": json.dumps(spec),
        "OMA_RUN_ID": "tools-run",
        "OMA_ATTEMPT": "1",
        "OMA_TERMINATION_LOG": str(tmp_path / "termination"),
        "STAMP_PATH": str(tmp_path / "stamps.jsonl"),
    }
    runner = subprocess.run(
        [sys.executable, "-m", "oma_runner"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
        check=False,
    )
    message: dict[str, Any] = json.loads((tmp_path / "termination").read_text())
    return runner.returncode, runner.stdout, message


def _stamps(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "stamps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tools_from_an_installed_package_run(tmp_path: Path) -> None:
    site = _package(
        tmp_path, {"stamp": "oma_test_tools:stamp", "more": "oma_test_tools:more_tools"}
    )
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "s1", "name": "stamp", "input": {"note": "hello"}},
                {"id": "s2", "name": "shout", "input": {"note": "loud"}},
            ]
        },
        {"text": "stamped"},
    ]
    code, out, message = _run(tmp_path, site, _spec(tmp_path, ["stamp", "shout"], script))
    assert code == 0 and message["status"] == "ok", out
    assert message["tasks"] == {"total": 1, "completed": 1, "failed": 0}
    # A Tool object and a callable returning tools are both loaded; each ran exactly once.
    assert sorted(_stamps(tmp_path), key=lambda s: s["tool"]) == [
        {"tool": "shout", "note": "LOUD"},
        {"tool": "stamp", "note": "hello", "call": "s1", "run": "tools-run"},
    ]


def test_an_unknown_tool_is_bad_input_naming_what_is_available(tmp_path: Path) -> None:
    site = _package(tmp_path, {"stamp": "oma_test_tools:stamp"})
    spec = _spec(tmp_path, ["stamp", "nope"], [{"text": "never asked"}])
    code, out, message = _run(tmp_path, site, spec)
    assert code == 2, out  # EXIT_PERMANENT: retrying cannot help
    assert message["status"] == "failed"
    assert "SPEC_INVALID: agent 'w' uses unknown tool(s) ['nope']" in message["message"]
    assert "'stamp'" in message["message"].split("available:")[1]  # the package's tool is known
    assert "unknown tool(s) ['nope']" in out
    assert _stamps(tmp_path) == []


def test_a_broken_entry_point_is_bad_input_with_a_message(tmp_path: Path) -> None:
    site = _package(
        tmp_path,
        {"stamp": "oma_test_tools:stamp", "junk": "oma_test_tools:not_tools"},
    )
    spec = _spec(tmp_path, ["stamp"], [{"text": "never asked"}])
    code, out, message = _run(tmp_path, site, spec)
    assert code == 2, out
    assert message["status"] == "failed"
    assert "entry point 'junk' of oma.tools gave 'just a string', not a Tool" in message["message"]
    assert _stamps(tmp_path) == []


def test_an_entry_point_that_does_not_import_is_bad_input(tmp_path: Path) -> None:
    site = _package(tmp_path, {"gone": "oma_no_such_module:tools"})
    spec = _spec(tmp_path, ["echo"], [{"text": "never asked"}])
    code, out, message = _run(tmp_path, site, spec)
    assert code == 2, out
    assert "cannot load entry point 'gone' (oma_no_such_module:tools)" in message["message"]
    assert "No module named 'oma_no_such_module'" in message["message"]
