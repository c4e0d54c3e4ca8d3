"""Tools the agents can call."""

from oma.tools.builtin import builtin_tools, idempotency_key
from oma.tools.define import AnyTool, Tool, ToolContext, ToolResult, define_tool

__all__ = [
    "AnyTool",
    "Tool",
    "ToolContext",
    "ToolResult",
    "builtin_tools",
    "define_tool",
    "idempotency_key",
]
