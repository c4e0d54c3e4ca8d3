"""``oma-runner`` started as a child process the way a pod runs it: a run spec and the pod's env
in, the termination message out (shared by the runner tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "r1", "name": "ledger_append", "input": {"entry": "first"}}]},
    {
        "tool_calls": [{"id": "r2", "name": "ledger_append", "input": {"entry": "second"}}],
        "delay": 1.5,
    },
    {"text": "recorded"},
]


def runner_spec(store: dict[str, Any]) -> dict[str, Any]:
    return {
        "agents": [
            {
                "name": "w",
                "tools": ["ledger_append"],
                "model": {"provider": "scripted", "script": SCRIPT},
            }
        ],
        "tasks": [{"title": "Record", "description": "Record.", "assignee": "w"}],
        "store": store,
    }


def runner_env(
    tmp_path: Path, spec: dict[str, Any] | str, attempt: int = 1, **extra: str
) -> dict[str, str]:
    text = spec if isinstance(spec, str) else json.dumps(spec)
    return {
        **os.environ,
        "OMA_RUN_SPEC": text,
        "OMA_RUN_ID": "pod-run",
        "OMA_ATTEMPT": str(attempt),
        "OMA_TERMINATION_LOG": str(tmp_path / "termination"),
        "OMA_LEDGER_PATH": str(tmp_path / "ledger.jsonl"),
        **extra,
    }


def start_runner(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "oma_runner"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def termination_message(tmp_path: Path) -> dict[str, Any]:
    message: dict[str, Any] = json.loads((tmp_path / "termination").read_text())
    return message
