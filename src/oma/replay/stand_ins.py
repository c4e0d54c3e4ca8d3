"""The model and the tools of a replay: they answer from the recording and reach nothing.

``RecordedModel`` answers an agent's call with the recorded turn of the same task (found by the
``# Task: TITLE`` heading its first message starts with) and the same turn number; a call the
recording has no turn for fails the task (``ReplayMissingError``), which the comparison then
reports. A recorded tool returns the result its call committed, whatever its input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict

from oma.llm.adapter import LLMResponseError
from oma.llm.types import ChatRequest, ChatResponse, TokenUsage
from oma.replay.recording import Recording
from oma.tools.define import AnyTool, Tool, ToolContext, ToolResult, define_tool

TASK_HEADING = "# Task: "


class ReplayMissingError(LLMResponseError):
    """The replayed run asked for a turn or a tool result the recording does not hold."""

    code = "REPLAY_NOT_RECORDED"
    transient = False  # the recording will not grow the turn on a retry


class RecordedModel:
    name = "recorded"

    def __init__(self, recording: Recording, agent: str) -> None:
        self.recording, self.agent = recording, agent

    async def chat(self, request: ChatRequest) -> ChatResponse:
        title = _title(request)
        turn = sum(1 for message in request.messages if message.role == "assistant")
        recorded = self.recording.turns.get((self.agent, title, turn))
        if recorded is None:
            raise ReplayMissingError(
                f"replay: the recording has no turn {turn + 1} of task {title!r} by agent "
                f"{self.agent!r}"
            )
        uses_tools = any(block.get("type") == "tool_use" for block in recorded.content)
        return ChatResponse.model_validate(
            {
                "content": recorded.content,
                "usage": TokenUsage(
                    input_tokens=recorded.input_tokens, output_tokens=recorded.output_tokens
                ),
                "stop_reason": "tool_use" if uses_tools else "end_turn",
                "model": "recorded",
            }
        )


def _title(request: ChatRequest) -> str:
    first = next((m for m in request.messages if m.role == "user"), None)
    if first is None:
        return ""
    text = first.content if isinstance(first.content, str) else ""
    if not isinstance(first.content, str):
        text = next((getattr(b, "text", "") for b in first.content if hasattr(b, "text")), "")
    heading = text.split("\n", 1)[0]
    return heading[len(TASK_HEADING) :] if heading.startswith(TASK_HEADING) else ""


class _AnyInput(BaseModel):
    model_config = ConfigDict(extra="allow")


def recorded_tool(recording: Recording, tool: AnyTool | None, name: str) -> AnyTool:
    """``tool`` (or, for a tool only the recording names, one that takes any input) answering
    from the recording: the same name, description and input model, its function replaced."""

    async def answer(args: Any, ctx: ToolContext) -> ToolResult:
        commit = recording.commits.get((ctx.agent_name, ctx.tool_call_id))
        if commit is None:
            raise ReplayMissingError(
                f"replay: the recording has no committed result of call {ctx.tool_call_id!r} "
                f"({name}) by agent {ctx.agent_name!r}"
            )
        result, record = commit.get("result") or {}, commit.get("record") or {}
        content = result.get("content")
        return ToolResult(
            str(record.get("output", "")),
            is_error=bool(result.get("is_error")),
            model_output=None if isinstance(content, str) else content,
        )

    if isinstance(tool, Tool):  # the same tool, down to how a restart treats it
        return dataclasses.replace(tool, execute=answer)
    return define_tool(name, "A tool of the recorded run.", _AnyInput, answer)
