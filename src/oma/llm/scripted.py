"""``ScriptedAdapter``: a deterministic model for offline runs, demos and tests.

It answers a call with turn N of its script, N being the number of assistant turns already in the
conversation it is given, so a resumed run continues the script where its conversation left off.
A script is a list of turns, or a dict mapping a substring of the conversation's first user
message (e.g. ``"# Task: Research"``) to a list of turns (``"*"`` matches anything).

A turn is ``{"text": ...}`` or ``{"tool_calls": [{"id"?, "name", "input"}]}``, with optional
``"usage": {"input_tokens", "output_tokens"}`` and ``"delay"`` (seconds).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from oma.llm.adapter import LLMResponseError
from oma.llm.types import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    TextBlock,
    TokenUsage,
    ToolUseBlock,
)


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ScriptedTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None
    usage: TokenUsage = Field(default_factory=lambda: TokenUsage(input_tokens=1, output_tokens=1))
    delay: float = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _something_to_say(self) -> ScriptedTurn:
        if self.text is None and not self.tool_calls:
            raise ValueError("a scripted turn needs 'text' or non-empty 'tool_calls'")
        return self


Script = list[ScriptedTurn]


class ScriptedAdapter:
    """An ``LLMAdapter`` that answers each call with the next turn of its script, no provider
    involved; ``calls`` keeps every request it was given."""

    name = "scripted"

    def __init__(self, script: list[Any] | dict[str, list[Any]]) -> None:
        if isinstance(script, dict):
            self.scripts = {key: _parse(turns) for key, turns in script.items()}
        else:
            self.scripts = {"*": _parse(script)}
        self.calls: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls.append(request)
        script, key = self._script_for(request)
        turn_index = sum(1 for message in request.messages if message.role == "assistant")
        if turn_index >= len(script):
            raise LLMResponseError(
                f"scripted model: script {key!r} has {len(script)} turns, but turn "
                f"{turn_index + 1} was requested"
            )
        turn = script[turn_index]
        if turn.delay:
            await asyncio.sleep(turn.delay)
        content: list[ContentBlock] = []
        if turn.text is not None:
            content.append(TextBlock(text=turn.text))
        for index, call in enumerate(turn.tool_calls or []):
            call_id = call.id or _stable_call_id(request, turn_index, index)
            content.append(ToolUseBlock(id=call_id, name=call.name, input=call.input))
        stop = "tool_use" if turn.tool_calls else "end_turn"
        return ChatResponse(content=content, usage=turn.usage, stop_reason=stop, model="scripted")

    def _script_for(self, request: ChatRequest) -> tuple[Script, str]:
        first = next((m.text for m in request.messages if m.role == "user"), "")
        for key, script in self.scripts.items():
            if key != "*" and key in first:
                return script, key
        if "*" in self.scripts:
            return self.scripts["*"], "*"
        raise LLMResponseError(
            f"scripted model: no script matches a conversation starting {first[:80]!r}"
        )


def _parse(turns: list[Any]) -> Script:
    return [
        turn if isinstance(turn, ScriptedTurn) else ScriptedTurn.model_validate(turn)
        for turn in turns
    ]


def _stable_call_id(request: ChatRequest, turn: int, index: int) -> str:
    """Deterministic per conversation, so a re-asked turn issues the same call ids."""
    first = next((m.text for m in request.messages if m.role == "user"), "")
    digest = hashlib.sha256(first.encode()).hexdigest()[:12]
    return f"call_{digest}_{turn}_{index}"
