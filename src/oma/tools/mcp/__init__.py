"""Tools from MCP servers (the ``mcp`` extra): each agent's ``mcpServers`` in a run spec.

A server's tools become oma tools, called through the same machinery as a built-in tool: the
call is saved before it runs, committed after, replayed on restore, gated by approvals. Every
call carries its idempotency key ``run_id:task_id:tool_call_id`` in the request's ``_meta``
under ``IDEMPOTENCY_KEY_META`` (the same on every attempt). The spec and the errors import no
SDK; ``open_mcp_tools`` (``oma.tools.mcp.toolset``) needs ``pip install 'oma[mcp]'``.
"""

from oma.tools.mcp.errors import (
    McpToolChangedError,
    McpToolError,
    McpToolNotOfferedError,
    McpUnavailableError,
)
from oma.tools.mcp.recovery import IDEMPOTENCY_KEY_META, model_tool_name
from oma.tools.mcp.spec import McpServerSpec

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "McpServerSpec",
    "McpToolChangedError",
    "McpToolError",
    "McpToolNotOfferedError",
    "McpUnavailableError",
    "model_tool_name",
]
