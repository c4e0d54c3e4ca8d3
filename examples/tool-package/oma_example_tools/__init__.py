"""Example tools for an oma runner image: ``word_count`` and ``shout`` (both pure, so both
idempotent: a call a crash left uncertain simply runs again)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from oma.tools import AnyTool, ToolContext, define_tool


class TextInput(BaseModel):
    text: str = Field(description="The text to work on")


async def _word_count(args: TextInput, ctx: ToolContext) -> str:
    return f"{len(args.text.split())} words"


async def _shout(args: TextInput, ctx: ToolContext) -> str:
    return args.text.upper()


def tools() -> list[AnyTool]:
    """What the ``oma.tools`` entry point gives the runner."""
    return [
        define_tool("word_count", "Count the words of a text.", TextInput, _word_count),
        define_tool("shout", "The text in capitals.", TextInput, _shout),
    ]
