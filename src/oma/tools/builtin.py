"""Built-in tools for demos and tests, selectable by name in a run spec.

``ledger_append`` has an external side effect (a record in a JSONL file or a Redis list, see
``records``) and uses
``run_id:task_id:tool_call_id`` as its idempotency key: a call re-run after a crash finds its key
already recorded and does not append again. ``tally`` is its opposite: every run of it adds a
line (no key check), so it is declared ``idempotent=False`` and a restore puts a call of it that
may have happened to a reviewer instead of re-running it.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from oma.tools import records
from oma.tools.define import AnyTool, ToolContext, define_tool
from oma.tools.records import RecordLocation

LEDGER_ENV = "OMA_LEDGER_PATH"
TALLY_ENV = "OMA_TALLY_PATH"


def ledger_location() -> RecordLocation:
    """Where ``ledger_append`` writes: ``OMA_LEDGER_URL`` + ``_KEY``, or ``OMA_LEDGER_PATH``."""
    return RecordLocation.from_env("LEDGER", ".oma/ledger.jsonl")


def tally_location() -> RecordLocation:
    """Where ``tally`` writes: ``OMA_TALLY_URL`` + ``_KEY``, or ``OMA_TALLY_PATH``."""
    return RecordLocation.from_env("TALLY", ".oma/tally.jsonl")


class EchoInput(BaseModel):
    text: str


async def _echo(args: EchoInput, ctx: ToolContext) -> str:
    return args.text


class WaitInput(BaseModel):
    seconds: float = Field(ge=0, le=60)


async def _wait(args: WaitInput, ctx: ToolContext) -> str:
    await asyncio.sleep(args.seconds)
    return f"waited {args.seconds}s"


class LedgerInput(BaseModel):
    entry: str = Field(description="What to record")
    amount: float = 0


def idempotency_key(ctx: ToolContext) -> str:
    """``run_id:task_id:tool_call_id`` (``-`` without a task): the same when a restore runs the
    call again, so a side effect recorded under it is not repeated."""
    return f"{ctx.run_id}:{ctx.task_id or '-'}:{ctx.tool_call_id}"


async def _ledger_append(args: LedgerInput, ctx: ToolContext) -> str:
    key = idempotency_key(ctx)
    record = {"key": key, "entry": args.entry, "amount": args.amount}
    await records.append_once(ledger_location(), key, record)
    return f"recorded {args.entry} ({args.amount:g}) as {key}"


class TallyInput(BaseModel):
    item: str = Field(description="What to count")
    amount: float = 1


async def _tally(args: TallyInput, ctx: ToolContext) -> str:
    record = {"call": idempotency_key(ctx), "item": args.item, "amount": args.amount}
    await records.append(tally_location(), record)
    return f"tallied {args.item} ({args.amount:g})"


def builtin_tools() -> dict[str, AnyTool]:
    """The built-in tools by name (``echo``, ``wait``, ``ledger_append``, ``tally``)."""
    tools: list[AnyTool] = [
        define_tool("echo", "Return the given text.", EchoInput, _echo),
        define_tool("wait", "Wait a number of seconds, then answer.", WaitInput, _wait),
        define_tool(
            "ledger_append",
            "Record an entry in the external ledger (idempotent per tool call).",
            LedgerInput,
            _ledger_append,
            consequential=True,
        ),
        define_tool(
            "tally",
            "Add an amount to a running tally (NOT idempotent: each run adds again).",
            TallyInput,
            _tally,
            consequential=True,
            idempotent=False,
        ),
    ]
    return {tool.name: tool for tool in tools}
