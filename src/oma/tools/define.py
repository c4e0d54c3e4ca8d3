"""Tools: a name, a description, a pydantic input model and an async ``execute(input, ctx)``.

Errors are results, not exceptions: invalid input, an unknown tool or a raising tool all become
an error ``ToolResult`` the model sees. ``ctx.tool_call_id`` is the model-issued call id, stable
across restore, so a tool with external side effects can use
``f"{ctx.run_id}:{ctx.task_id}:{ctx.tool_call_id}"`` as an idempotency key.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from oma.errors import AttemptInterruptedError
from oma.llm.parts import RichContent, RichContentError, check_parts, summary_text
from oma.llm.types import ToolSpec

InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call runs: the run, task, agent and attempt, and the call's id (the same
    across attempts, so ``run_id:task_id:tool_call_id`` is a key a side effect can be made
    idempotent with)."""

    run_id: str
    task_id: str | None
    tool_call_id: str
    agent_name: str
    attempt: int = 1


@dataclass(frozen=True)
class ToolResult:
    """What the model sees: ``data`` as the tool_result text, flagged as an error or not; or,
    with ``model_output``, parts (text, image, file: ``oma.llm.parts``) instead of the text,
    e.g. ``ToolResult("chart", model_output=[{"type": "text", "text": "Q3"}, {"type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": png_b64}}])``."""

    data: str
    is_error: bool = False
    model_output: str | Sequence[dict[str, Any]] | None = None

    @property
    def content(self) -> RichContent:
        """The tool_result content the model is sent (checked: see ``checked``)."""
        if self.model_output is None:
            return self.data
        return self.model_output if isinstance(self.model_output, str) else list(self.model_output)

    def checked(self, tool: str) -> ToolResult:
        """This result with its parts checked; an error result naming the bad part if not."""
        if self.model_output is None or isinstance(self.model_output, str):
            return self
        try:
            parts = check_parts(self.model_output)
        except RichContentError as exc:
            return ToolResult(f'Tool "{tool}" returned content the model cannot see: {exc}', True)
        return ToolResult(self.data, self.is_error, parts)

    @property
    def summary(self) -> str:
        """The text view of the content: the call's record keeps this, not media bytes."""
        return summary_text(self.content)


ToolOutput = ToolResult | str | BaseModel | dict[str, Any] | list[Any] | None
Execute = Callable[[InputT, ToolContext], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class Tool(Generic[InputT]):
    """A tool an agent may call (``define_tool`` makes one): its name, description and input
    model for the model, the function that runs it, and how a restart treats it
    (``idempotent``: run again with the same key; otherwise a reviewer decides)."""

    name: str
    description: str
    input_model: type[InputT]
    execute: Execute[InputT]
    consequential: bool = False
    idempotent: bool = True

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
        )

    def validate_input(self, raw: dict[str, Any]) -> InputT:
        return self.input_model.model_validate(raw)

    async def run(self, raw: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Validate and execute; every failure becomes an error result."""
        try:
            parsed = self.validate_input(raw)
        except ValidationError as exc:
            return self.invalid_input_result(exc)
        return await self.execute_validated(parsed, ctx)

    def invalid_input_result(self, error: ValidationError) -> ToolResult:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in error.errors()
        )
        return ToolResult(f'Invalid input for tool "{self.name}": {problems}', is_error=True)

    async def execute_validated(self, parsed: InputT, ctx: ToolContext) -> ToolResult:
        try:
            output = await self.execute(parsed, ctx)
        except AttemptInterruptedError:
            raise  # the call's outcome is unknown: the attempt ends, the restart decides
        except Exception as exc:  # a tool's failure is data for the model, not a crash
            return ToolResult(f'Tool "{self.name}" failed: {exc}', is_error=True)
        return normalize_output(output).checked(self.name)


def define_tool(
    name: str,
    description: str,
    input_model: type[InputT],
    execute: Execute[InputT],
    *,
    consequential: bool = False,
    idempotent: bool = True,
) -> Tool[InputT]:
    """``idempotent=False``: running the call twice would do its effect twice. Such a call is
    marked as started (durably) before it runs, and a restore that finds it started but not
    committed does not run it again by itself: it suspends for a reviewer to decide."""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"tool name {name!r} must be letters, digits, '_' or '-'")
    return Tool(name, description, input_model, execute, consequential, idempotent)


def normalize_output(output: ToolOutput) -> ToolResult:
    if isinstance(output, ToolResult):
        return output
    if output is None:
        return ToolResult("")
    if isinstance(output, str):
        return ToolResult(output)
    if isinstance(output, BaseModel):
        return ToolResult(output.model_dump_json())
    return ToolResult(json.dumps(output, ensure_ascii=False, separators=(",", ":")))


AnyTool = Tool[Any]
