"""An MCP server's tool as an oma tool: the server's schema for the model, its answer as a result.

The input is passed on as the model gave it (the server validates it against its own schema;
a refusal is an error result the model sees). How a restart treats a call follows the tool's
annotations unless the spec overrides it (``recovery.is_idempotent``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mcp.types import CallToolResult, ImageContent, TextContent
from mcp.types import Tool as ListedTool
from pydantic import BaseModel, ConfigDict

from oma.llm.types import ToolSpec
from oma.tools.builtin import idempotency_key
from oma.tools.define import Tool, ToolContext, ToolResult
from oma.tools.mcp.connection import McpConnection
from oma.tools.mcp.recovery import is_idempotent, model_tool_name


class McpArguments(BaseModel):
    """Whatever object the model passed; the server checks it against its schema."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpTool(Tool[McpArguments]):
    """``name`` is what the model sees (``<server>__<tool>``); ``server_tool`` the server's."""

    server: str = ""
    server_tool: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )


def mcp_tool(connection: McpConnection, listed: ListedTool) -> McpTool:
    """The oma tool for ``listed``, calling it through ``connection``."""
    server = connection.spec

    async def execute(arguments: McpArguments, ctx: ToolContext) -> ToolResult:
        answer = await connection.call(
            listed.name, arguments.model_dump(mode="json"), idempotency_key(ctx)
        )
        return tool_result(answer)

    hints = listed.annotations
    idempotent = is_idempotent(
        read_only=hints.read_only_hint if hints else None,
        idempotent=hints.idempotent_hint if hints else None,
        destructive=hints.destructive_hint if hints else None,
        override=server.idempotent.get(listed.name),
    )
    return McpTool(
        name=model_tool_name(server.name, listed.name),
        description=listed.description or listed.title or listed.name,
        input_model=McpArguments,
        execute=execute,
        # Anything the server does not promise to leave unchanged is consequential to a gate.
        consequential=not (hints is not None and hints.read_only_hint is True),
        idempotent=idempotent,
        server=server.name,
        server_tool=listed.name,
        input_schema=listed.input_schema,
    )


def tool_result(answer: CallToolResult) -> ToolResult:
    """Text parts as the text; images as image parts; structured content, when that is all
    there is, as its JSON; anything else named by its kind (the model sees that it was
    there)."""
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for block in answer.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
            parts.append({"type": "image", "source": source})
        else:
            note = f"[{block.type} content not shown]"
            texts.append(note)
            parts.append({"type": "text", "text": note})
    if not answer.content and answer.structured_content is not None:
        texts.append(json.dumps(answer.structured_content, ensure_ascii=False))
    text = "\n".join(texts)
    has_media = any(part["type"] != "text" for part in parts)
    return ToolResult(text, answer.is_error, parts if has_media else None)
