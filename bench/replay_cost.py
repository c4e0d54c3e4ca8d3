"""Replay cost: ``oma replay`` of recorded runs of 100, 300 and 1,000 turns, and what it finds.

    .venv/bin/python bench/replay_cost.py [--quick] [--backends memory,redis,postgres]

(``--quick``: one run of 30 turns, in memory unless ``--backends`` says otherwise.)

Records a task of N turns (a tool call each, saved fenced at every boundary with the default
history, as ``oma run`` saves) into each store, then replays it with ``oma.replay.replay_run``:
the same spec, its model answered from the recorded turns, its tool from its commits, nothing
reached (the spec's model is Anthropic on a port nobody listens on). Prints the recording's own
time (the baseline, the same run with its live model in this process), the replay's time and
their ratio, whether it reproduces, and, with one word of the task's description changed, the
boundary and path the replay names. The issue's bound: a 1,000-turn run replayed in under 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import backends, header, parse_backends
from pydantic import BaseModel

from oma.llm.types import ChatRequest, ChatResponse
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.replay import replay_run
from oma.spec import RunSpec
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, define_tool

TURNS = (100, 300, 1000)
QUICK_TURNS = (30,)
RUN_ID = "replayed"
DESCRIPTION = "Note every finding in turn."


class NoteInput(BaseModel):
    note: str


async def _note(args: NoteInput, ctx: ToolContext) -> str:
    return f"noted {args.note}"


NOTE = define_tool("note", "Note a finding.", NoteInput, _note)


class Live:
    """The recorded run's model: a tool call a turn for ``turns`` turns, then an answer."""

    name = "live"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def chat(self, request: ChatRequest) -> ChatResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        usage = {"input_tokens": 50 + turn, "output_tokens": 20}
        if turn >= self.turns:
            return ChatResponse.model_validate(
                {"content": [{"type": "text", "text": "done"}], "usage": usage}
            )
        call = {"type": "tool_use", "id": f"c{turn}", "name": "note"}
        call["input"] = {"note": f"finding {turn} " * 8}
        return ChatResponse.model_validate({"content": [call], "usage": usage})


def _spec(turns: int, description: str) -> RunSpec:
    with socket.socket() as s:  # a port nobody listens on: a replay that called out would fail
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = {"provider": "anthropic", "name": "m", "baseURL": f"http://127.0.0.1:{port}"}
    return RunSpec.model_validate(
        {
            "agents": [{"name": "worker", "tools": ["note"], "maxTurns": turns, "model": model}],
            "tasks": [{"title": "Long", "description": description, "assignee": "worker"}],
        }
    )


async def record(store: Any, turns: int) -> float:
    # turns - 1 tool calls and the answer: ``turns`` model turns in all (a spec allows 1,000)
    worker = AgentConfig(name="worker", adapter=Live(turns - 1), max_turns=turns, tools=[NOTE])
    options = CheckpointOptions(store=store, run_id=RUN_ID, fence=True, journal=True)
    started = time.perf_counter()
    result = await OpenMultiAgent().run_tasks(
        Team(name="bench", agents=[worker]),
        [{"title": "Long", "description": DESCRIPTION, "assignee": "worker"}],
        checkpoint=options,
    )
    assert result.success
    return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    print(header("replay cost: a recorded run replayed offline", args.quick))
    print(
        "recorded: the run itself (live model, this process); replay: replay_run of it "
        "(reading the recording, the run again, every boundary compared); edited: one word "
        "of the task's description changed"
    )
    with tempfile.TemporaryDirectory() as workdir:
        async with backends(Path(workdir), args.backends) as factories:
            for name, make in factories.items():
                for turns in QUICK_TURNS if args.quick else TURNS:
                    await _row(name, make, turns)


async def _row(name: str, make: Any, turns: int) -> None:
    store = await make()
    try:
        recorded = await record(store, turns)
        report = await replay_run(_spec(turns, DESCRIPTION), store, RUN_ID, tools={"note": NOTE})
        edited = DESCRIPTION.replace("every", "each")
        changed = await replay_run(_spec(turns, edited), store, RUN_ID, tools={"note": NOTE})
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()
    found = changed.divergence
    named = f"boundary {found.seq} {found.path}" if found is not None else "nothing (!)"
    print(
        f"{name:9} {turns:>5} turns  recorded {recorded:6.2f} s  replay {report.seconds:6.2f} s "
        f"({report.seconds / recorded:4.2f}x)  boundaries {report.boundaries}  "
        f"reproduces {'yes' if report.reproduces else 'NO: ' + str(report.divergence)}  "
        f"edited: {named}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run (smoke tests)")
    parser.add_argument("--backends", type=parse_backends, default=None)
    args = parser.parse_args(argv)
    if args.backends is None:
        args.backends = ["memory"] if args.quick else ["memory", "redis", "postgres"]
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
