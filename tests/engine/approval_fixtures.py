"""Wiring of the approval scenarios c (tool call) and d (task dispatch) of the TS data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from oma.approval.gates import ToolCallGateContext
from oma.llm.scripted import ScriptedAdapter
from oma.store import FileStore
from oma.team import AgentConfig, Team
from oma.tools import AnyTool, ToolContext, define_tool
from tests.engine.helpers import copy_store_file

CHARGE_TASK = "dd06e1fd-9ffc-41f8-bcc3-0056cb907812"
CHARGE_REQUEST = "apr_ae114847e935829ae1d26b8c56b0b88f"
CHARGE_HASH = "990bd81ea337376ed7042d17bbb136daefc0aa108726bc5466d6dbf88b55d52d"
DEPLOY_TASK = "c1bf3e5c-90c4-47a1-aaea-cd4ec93f22c1"
DEPLOY_REQUEST = "apr_2fef04da35613422eb9f60193cda2dc2"


class ChargeInput(BaseModel):
    amount: int = Field(gt=0)


@dataclass
class Recorder:
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    gate_calls: list[Any] = field(default_factory=list)

    def gate(self, answer: Any) -> Any:
        def decide(ctx: Any) -> Any:
            self.gate_calls.append(ctx)
            return answer

        return decide


def charge_tool(recorder: Recorder) -> AnyTool:
    async def charge(args: ChargeInput, ctx: ToolContext) -> str:
        recorder.tool_calls.append((ctx.tool_call_id, args.model_dump()))
        return f"charged:{args.amount}"

    return define_tool("charge_card", "Charge a card.", ChargeInput, charge, consequential=True)


def charge_team(recorder: Recorder, after_tool: str = "charged") -> tuple[Team, ScriptedAdapter]:
    model = ScriptedAdapter(
        [
            {
                "tool_calls": [
                    {"id": "tool-call-1", "name": "charge_card", "input": {"amount": "7"}}
                ]
            },
            {"text": after_tool},
        ]
    )
    agent = AgentConfig(name="operator", adapter=model, tools=[charge_tool(recorder)])
    return Team(name="conf-c", agents=[agent]), model


def deploy_team() -> tuple[Team, ScriptedAdapter]:
    model = ScriptedAdapter(
        {
            "# Task: Build": [{"text": "build 1.2.3 ready"}],
            "# Task: Deploy": [{"text": "deployed 1.2.3"}],
        }
    )
    return Team(name="conf-d", agents=[AgentConfig(name="worker", adapter=model)]), model


def ts_store(name: str, tmp_path: Path) -> tuple[FileStore, Path]:
    path = copy_store_file(name, tmp_path)
    return FileStore(path), path


def stored(path: Path, prefix: str) -> dict[str, Any]:
    for entry in json.loads(path.read_text())["entries"]:
        # The attempt log sits under the checkpoint prefix too; tests want the snapshot.
        if entry["key"].startswith(prefix) and not entry["key"].endswith("/attempts"):
            value: dict[str, Any] = json.loads(entry["value"])
            return value
    raise AssertionError(f"no {prefix} key in {path}")


def gate_context_fields(ctx: ToolCallGateContext) -> dict[str, Any]:
    return {
        "toolName": ctx.tool_name,
        "input": ctx.input,
        "agentName": ctx.agent_name,
        "consequential": ctx.consequential,
        "runId": ctx.run_id,
        "taskId": ctx.task_id,
        "toolCallId": ctx.tool_call_id,
    }
