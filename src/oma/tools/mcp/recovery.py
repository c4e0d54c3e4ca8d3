"""How a restart treats an MCP tool's calls, and the names and key the model and server see.

Pure: no SDK. The MCP annotations are hints from the server; oma takes the cautious reading.
"""

from __future__ import annotations

import re

# The request ``_meta`` entry every call carries (documented in docs/mcp.md).
IDEMPOTENCY_KEY_META = "oma.dev/idempotency-key"

# What both model APIs accept as a tool name (Anthropic: ^[a-zA-Z0-9_-]{1,64}$).
MODEL_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def model_tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``: ``<server>__<tool>``, so two
    servers' tools of the same name never meet (approval gates name tools this way too)."""
    return f"{server}__{tool}"


def is_idempotent(
    *,
    read_only: bool | None,
    idempotent: bool | None,
    destructive: bool | None,
    override: bool | None,
) -> bool:
    """Run again with the same key after an uncertain restart (True), or put the call to a
    reviewer (False). The spec's per-tool override wins; otherwise a tool is re-run only when
    it says it changes nothing (``readOnlyHint``), or that it is idempotent and not destructive.
    A tool that says nothing is not re-run: the hints default to the cautious side."""
    if override is not None:
        return override
    if read_only is True:
        return True
    return idempotent is True and destructive is not True
