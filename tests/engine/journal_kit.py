"""What the run journal tests share: a one-agent team whose model calls a note tool turn by
turn (and can crash an attempt once), and its task."""

from __future__ import annotations

from pydantic import BaseModel

from oma.llm.types import ChatRequest, ChatResponse
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool
from tests.engine.crashing import SimulatedCrash


class NoteInput(BaseModel):
    text: str


class Model:
    """Turn n (the assistant messages so far) calls ``note`` until ``calls`` turns, then
    answers; ``fail_at`` raises once at that turn (a crash of the attempt)."""

    name = "turns"

    def __init__(self, calls: int, fail_at: int | None = None) -> None:
        self.calls = calls
        self.fail_at = fail_at

    async def chat(self, request: ChatRequest) -> ChatResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn == self.fail_at:
            self.fail_at = None
            raise SimulatedCrash("the attempt dies here")  # no retry catches it
        if turn >= self.calls:
            text = {"type": "text", "text": "done \x1b[31m"}
            return ChatResponse.model_validate({"content": [text], "stop_reason": "end_turn"})
        use = {"type": "tool_use", "id": f"c{turn}", "name": "note", "input": {"text": f"n{turn}"}}
        return ChatResponse.model_validate(
            {"content": [use], "stop_reason": "tool_use", "usage": {"input_tokens": 3}}
        )


def note_team(model: Model, executed: list[str]) -> Team:
    async def note(args: NoteInput, ctx: ToolContext) -> str:
        executed.append(ctx.tool_call_id)
        return f"noted {args.text}"

    tool = define_tool("note", "Note a text.", NoteInput, note)
    worker = AgentConfig(
        name="worker", adapter=model, max_turns=20, tools=[tool], system_prompt="Be brief."
    )
    return Team(name="journal", agents=[worker], shared_memory_store=InMemoryStore())


TASKS = [{"title": "Note", "description": "Note things.", "assignee": "worker"}]
