"""A successful tool result is stored with ``is_error: false``, as the TypeScript reference
stores it (its files in shared/conformance/oma-ts), not without the flag."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from oma.checkpoint import Checkpoint
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.conformance_data import load_json


def _tool_results(value: Any) -> list[dict[str, Any]]:
    """Every tool_result block in a JSON document, also inside JSON-encoded strings."""
    found: list[dict[str, Any]] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and item.startswith("{"):
            pending.append(json.loads(item))
        elif isinstance(item, dict):
            if item.get("type") == "tool_result":
                found.append(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


class NoInput(BaseModel):
    pass


def test_the_reference_writes_the_flag_on_success() -> None:
    results = _tool_results(load_json("b-after-restore.store.json"))
    assert results and all("is_error" in r for r in results)
    assert any(r["is_error"] is False for r in results)


async def test_we_write_it_the_same_way() -> None:
    async def ok(args: NoInput, ctx: ToolContext) -> str:
        return "fine"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "c1", "name": "ok", "input": {}}]},
        {"text": "done"},
    ]
    agent = AgentConfig(
        name="w", adapter=ScriptedAdapter(script), tools=[define_tool("ok", "Ok.", NoInput, ok)]
    )
    store = InMemoryStore()
    result = await OpenMultiAgent().run_tasks(
        Team(name="t", agents=[agent]),
        [{"title": "T", "description": "d", "assignee": "w"}],
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="flag"),
    )
    assert result.success
    entry = await store.get(Checkpoint(store, run_id="flag").key)
    assert entry is not None
    (block,) = _tool_results(json.loads(entry.value))
    assert block["is_error"] is False and block["content"] == "fine"
