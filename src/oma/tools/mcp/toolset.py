"""Every agent's MCP servers for one attempt: connected at its start, closed at its end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from mcp.types import Tool as ListedTool

from oma.tools.define import AnyTool
from oma.tools.mcp.connection import McpConnection
from oma.tools.mcp.errors import McpToolError, McpToolNotOfferedError
from oma.tools.mcp.recovery import MODEL_TOOL_NAME, model_tool_name
from oma.tools.mcp.spec import McpServerSpec
from oma.tools.mcp.tool import mcp_tool


@asynccontextmanager
async def open_mcp_tools(
    servers: Mapping[str, Sequence[McpServerSpec]], environ: Mapping[str, str] | None = None
) -> AsyncIterator[dict[str, list[AnyTool]]]:
    """Agent name -> the tools of its MCP servers (allow-listed, named ``<server>__<tool>``).
    Connects to all servers at once; one that cannot be reached raises
    ``McpUnavailableError`` (transient) after the others are closed again."""
    connections = [
        (agent, McpConnection(spec, environ)) for agent, specs in servers.items() for spec in specs
    ]
    try:
        listed = await _open_all([connection for _, connection in connections])
        tools: dict[str, list[AnyTool]] = {agent: [] for agent in servers}
        for (agent, connection), offered in zip(connections, listed, strict=True):
            allowed = chosen(connection, offered, agent)
            tools[agent].extend(mcp_tool(connection, found) for found in allowed)
        yield tools
    finally:
        await asyncio.gather(*(connection.close() for _, connection in connections))


async def _open_all(connections: Sequence[McpConnection]) -> list[list[ListedTool]]:
    """Each connection's tools; the first failure stops the others' waiting and is raised
    as itself (not in a group)."""
    try:
        async with asyncio.TaskGroup() as group:
            opening = [group.create_task(connection.open()) for connection in connections]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in opening]


def chosen(
    connection: McpConnection, offered: Sequence[ListedTool], agent: str = ""
) -> list[ListedTool]:
    """The server's tools the spec allows ``agent``, each with a name the models can take. An
    allow-listed tool the server does not offer (``McpToolNotOfferedError``), or whose name no
    model can take, is refused; without an allow-list such a name is left out."""
    spec = connection.spec
    by_name = {tool.name: tool for tool in offered}
    usable = {n for n in by_name if MODEL_TOOL_NAME.fullmatch(model_tool_name(spec.name, n))}
    if spec.tools is None:
        return [by_name[name] for name in sorted(usable)]
    missing = [name for name in spec.tools if name not in by_name]
    if missing:
        raise McpToolNotOfferedError(
            agent,
            [model_tool_name(spec.name, name) for name in missing],
            f"MCP server {spec.name!r} at {connection.where} does not offer {missing} "
            f"(it offers {sorted(by_name)[:50]}); fix the spec's 'tools'",
        )
    unusable = [name for name in spec.tools if name not in usable]
    if unusable:
        raise McpToolError(
            f"MCP server {spec.name!r}: tool name(s) {unusable} give model tool names that are "
            "not 1-64 letters, digits, '_' or '-' (with the server's name and '__')"
        )
    return [by_name[name] for name in spec.tools]
