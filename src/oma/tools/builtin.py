"""Built-in tools for demos and tests, selectable by name in a run spec.

``ledger_append`` has an external side effect (a line in a JSONL ledger file) and uses
``run_id:task_id:tool_call_id`` as its idempotency key: a call re-run after a crash finds its key
already recorded and does not append again. ``tally`` is its opposite: every run of it adds a
line (no key check), so it is declared ``idempotent=False`` and a restore puts a call of it that
may have happened to a reviewer instead of re-running it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path

from pydantic import BaseModel, Field

from oma.tools.define import AnyTool, ToolContext, define_tool

LEDGER_ENV = "OMA_LEDGER_PATH"
TALLY_ENV = "OMA_TALLY_PATH"


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
    return f"{ctx.run_id}:{ctx.task_id or '-'}:{ctx.tool_call_id}"


async def _ledger_append(args: LedgerInput, ctx: ToolContext) -> str:
    path = Path(os.environ.get(LEDGER_ENV, ".oma/ledger.jsonl"))
    key = idempotency_key(ctx)
    await asyncio.to_thread(_append_once, path, key, args)
    return f"recorded {args.entry} ({args.amount:g}) as {key}"


def _append_once(path: Path, key: str, args: LedgerInput) -> bool:
    """Append unless ``key`` is already in the ledger; the file lock makes check+append atomic."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        ledger.seek(0)
        for line in ledger:
            if line.strip() and json.loads(line).get("key") == key:
                return False
        ledger.write(json.dumps({"key": key, "entry": args.entry, "amount": args.amount}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
        return True


class TallyInput(BaseModel):
    item: str = Field(description="What to count")
    amount: float = 1


async def _tally(args: TallyInput, ctx: ToolContext) -> str:
    path = Path(os.environ.get(TALLY_ENV, ".oma/tally.jsonl"))
    line = json.dumps({"call": idempotency_key(ctx), "item": args.item, "amount": args.amount})
    await asyncio.to_thread(_append_line, path, line)
    return f"tallied {args.item} ({args.amount:g})"


def _append_line(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as tally:
        tally.write(line + "\n")
        tally.flush()
        os.fsync(tally.fileno())


def builtin_tools() -> dict[str, AnyTool]:
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
