"""What the CLI tests of run histories share: a one-agent spec with the ledger tool, the CLI
runner, and the ledger's keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from oma.cli import app

runner = CliRunner()
RUN = "hist"


def spec_file(tmp_path: Path, store: dict[str, Any], turns: int = 6) -> Path:
    script = [
        {"tool_calls": [{"id": f"c{n}", "name": "ledger_append", "input": {"entry": f"e{n}"}}]}
        for n in range(turns)
    ]
    spec = tmp_path / "spec.json"
    agent = {
        "name": "clerk",
        "tools": ["ledger_append"],
        "model": {"provider": "scripted", "script": [*script, {"text": "ok"}]},
    }
    tasks = [{"title": "T", "description": "t", "assignee": "clerk"}]
    spec.write_text(json.dumps({"agents": [agent], "tasks": tasks, "store": store}))
    return spec


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def ledger_keys(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()]
