"""A long run for the history and segment tests: scripted tool-calling turns, each noting a
finding with a real tool, checkpointed fenced in the journal layout; a provider outage at a
chosen turn parks it with its task in flight."""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel

from oma.checkpoint import segments
from oma.checkpoint.keys import checkpoint_key, segments_journal_key
from oma.checkpoint.retention import HistoryPolicy
from oma.errors import ModelUnavailableError
from oma.llm.scripted import ScriptedAdapter
from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import JournalStore
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool

RUN_ID = "history-run"


class NoteInput(BaseModel):
    note: str


async def _note(args: NoteInput, ctx: ToolContext) -> str:
    return f"noted {args.note}"


class StopsAt:
    """Scripted tool-calling turns, then a provider outage at turn ``stop`` (the run parks)."""

    name = "stops-at"

    def __init__(self, turns: int, stop: int | None) -> None:
        script: list[dict[str, Any]] = [
            {"tool_calls": [{"id": f"c{i}", "name": "note", "input": {"note": f"n{i} " * 30}}]}
            for i in range(turns)
        ]
        self.script = ScriptedAdapter([*script, {"text": "done"}])
        self.stop, self.calls = stop, 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.stop is not None and self.calls >= self.stop:
            raise ModelUnavailableError("the test's outage")
        return await self.script.chat(request)


async def run_long(
    store: JournalStore,
    model: StopsAt,
    *,
    history: HistoryPolicy | None = HistoryPolicy(),  # noqa: B008  # frozen: shared safely
    restore: bool = False,
    journal: bool = True,
) -> None:
    note = define_tool("note", "Note a finding.", NoteInput, _note)
    worker = AgentConfig(name="worker", adapter=model, max_turns=200, tools=[note])
    team = Team(name="history", agents=[worker])
    options = CheckpointOptions(
        store=store, run_id=RUN_ID, fence=True, journal=journal, history=history
    )
    oma = OpenMultiAgent(park_on_model_outage=True)
    with contextlib.suppress(ModelUnavailableError):
        if restore:
            await oma.restore(team, checkpoint=options)
        else:
            await oma.run_tasks(
                team, [{"title": "Long", "description": "Many turns."}], checkpoint=options
            )


async def segment_texts(store: JournalStore) -> dict[int, str]:
    """The run's segments journal (every record kept), by number."""
    side = await store.journal_get(segments_journal_key(checkpoint_key(RUN_ID)), history=True)
    return segments.by_number(side)
