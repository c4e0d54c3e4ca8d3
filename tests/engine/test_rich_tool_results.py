"""Rich tool results: a tool shows the model text, image and file parts. The parts go into the
conversation and the call's commit as they are (a restore replays them, the tool does not run
again); the call's record keeps a text view without the bytes; bad parts are an error result
the model sees, not a crash."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from oma.checkpoint import Checkpoint
from oma.llm.scripted import ScriptedAdapter
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, ToolResult, define_tool
from tests.engine.crashing import SimulatedCrash

PNG = "iVBORw0KGgo="  # base64 of the PNG signature
PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "Rendered preview"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {
        "type": "file",
        "filename": "report.pdf",
        "source": {
            "type": "url",
            "media_type": "application/pdf",
            "url": "https://example.com/report.pdf",
        },
    },
]
SUMMARY = "\n".join(
    [
        "Rendered preview",
        "[image: image/png; inline data]",
        "[file: report.pdf; application/pdf; URL reference]",
    ]
)


class NoInput(BaseModel):
    pass


class SeenRequests(ScriptedAdapter):
    """The scripted model, keeping every request it was sent (what the model saw)."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        super().__init__(script)
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return await super().chat(request)


def _team(parts: list[dict[str, Any]], ran: list[str], crash_in: str | None, store: Any) -> Team:
    async def render(args: NoInput, ctx: ToolContext) -> ToolResult:
        ran.append(ctx.tool_call_id)
        return ToolResult("preview rendered", model_output=parts)

    async def slow(args: NoInput, ctx: ToolContext) -> str:
        ran.append(ctx.tool_call_id)
        if crash_in == ctx.tool_call_id:
            for _ in range(500):  # until the render call's commit is durable
                entry = await store.get(Checkpoint(store, run_id="rich").key)
                if entry is not None and '"tool_use_id":"r1"' in entry.value:
                    raise SimulatedCrash("killed inside s2, after r1 committed")
                await asyncio.sleep(0.01)
            raise AssertionError("r1 was never committed")
        return "slow done"

    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "r1", "name": "render", "input": {}},
                {"id": "s2", "name": "slow", "input": {}},
            ]
        },
        {"text": "looked at it"},
    ]
    agent = AgentConfig(
        name="w",
        adapter=SeenRequests(script),
        tools=[
            define_tool("render", "Render.", NoInput, render),
            define_tool("slow", "Slow.", NoInput, slow),
        ],
    )
    return Team(name="t", agents=[agent])


TASKS: list[dict[str, Any]] = [{"title": "Look", "description": "Render it.", "assignee": "w"}]


async def test_parts_are_committed_as_they_are_and_replayed_after_a_crash() -> None:
    store, ran = InMemoryStore(), list[str]()
    options = CheckpointOptions(journal=False, store=store, run_id="rich")
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(_team(PARTS, ran, "s2", store), TASKS, checkpoint=options)
    entry = await store.get(Checkpoint(store, run_id="rich").key)
    assert entry is not None
    (task,) = json.loads(entry.value)["inFlightTasks"]
    (commit,) = [c["commit"] for c in task["pendingToolCalls"] if "commit" in c]
    assert commit["result"]["content"] == PARTS  # the parts, exactly
    assert commit["record"]["output"] == SUMMARY  # no bytes, no URL in the record

    team = _team(PARTS, ran, None, store)
    result = await OpenMultiAgent().restore(team, checkpoint=options)
    assert result.success, result.status
    assert sorted(ran) == ["r1", "s2", "s2"]  # r1 replayed from its commit, never run again
    (task_result,) = result.task_results.values()
    (first_record, second_record) = task_result.tool_calls
    assert first_record.output == SUMMARY and second_record.output == "slow done"
    adapter = team.agents[0].adapter
    assert isinstance(adapter, SeenRequests)
    sent = adapter.requests[-1].messages[-1].content
    assert sent[0].content == PARTS and sent[0].is_error is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("parts", "named"),
    [
        ([], "must not be an empty list"),
        ([{"type": "video"}], 'model_output[0].type must be "text", "image" or "file"'),
        (
            [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "a b"},
                }
            ],
            "model_output[0].source.data must be base64",
        ),
        (
            [
                {
                    "type": "file",
                    "filename": "x",
                    "source": {
                        "type": "url",
                        "media_type": "text/plain",
                        "url": "file:///etc/passwd",
                    },
                }
            ],
            "model_output[0].source.url must be an absolute http(s) URL",
        ),
        (
            [{"type": "file", "filename": " ", "source": {}}],
            "model_output[0].filename must be a non-empty string",
        ),
    ],
)
async def test_bad_parts_are_an_error_result_the_model_sees(
    parts: list[dict[str, Any]], named: str
) -> None:
    store, ran = InMemoryStore(), list[str]()
    team = _team(parts, ran, None, store)
    result = await OpenMultiAgent().run_tasks(
        team,
        TASKS,
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="rich"),
    )
    assert result.success
    (task_result,) = result.task_results.values()
    render = task_result.tool_calls[0]
    assert render.output.startswith('Tool "render" returned content the model cannot see: ')
    assert named in render.output
    adapter = team.agents[0].adapter
    assert isinstance(adapter, SeenRequests)
    block = adapter.requests[-1].messages[-1].content[0]
    assert block.is_error is True and named in block.content  # type: ignore[union-attr]
