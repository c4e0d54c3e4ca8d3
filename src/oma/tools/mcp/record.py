"""The MCP tools each agent of a run saw, recorded when the run starts and checked on resume.

A restored conversation names tools by the names the model saw; if a server now gives one of
those names a different meaning (another schema, description or recovery), or dropped it, a
resumed attempt would call something else under the same name. So the first attempt records a
digest of each tool in the run's store (``__oma_checkpoint__/<runId>/mcp-tools``) and every
resumed attempt compares: a tool changed or gone fails the attempt (``McpToolChangedError``,
before anything runs); a tool added since is not offered to the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import orjson
from pydantic import BaseModel, ValidationError

from oma.checkpoint.keys import checkpoint_key, tool_record_key
from oma.errors import OmaError, StoreCorruptError
from oma.store.base import MemoryStore
from oma.tools.define import AnyTool
from oma.tools.mcp.errors import McpToolChangedError, McpToolNotOfferedError


class ToolRecord(BaseModel):
    """Agent name -> the model's tool name -> its digest."""

    agents: dict[str, dict[str, str]]


def record_key(run_id: str) -> str:
    return tool_record_key(checkpoint_key(run_id))


def digest(tool: AnyTool) -> str:
    """What a call of the tool means: its spec for the model and how a restart treats it."""
    spec = tool.spec
    shown = {
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "idempotent": tool.idempotent,
        "server": getattr(tool, "server", None),
        "serverTool": getattr(tool, "server_tool", None),
    }
    return hashlib.sha256(orjson.dumps(shown, option=orjson.OPT_SORT_KEYS)).hexdigest()


def of(tools: Mapping[str, Sequence[AnyTool]]) -> ToolRecord:
    return ToolRecord(agents={a: {t.name: digest(t) for t in ts} for a, ts in tools.items()})


async def gone_or_not_offered(
    store: MemoryStore, run_id: str, error: McpToolNotOfferedError, resumed: bool
) -> OmaError:
    """What an allow-listed tool the server does not offer means for this run: gone from its
    server since a resumed run recorded it (``McpToolChangedError``), else a spec to fix
    (``error``; a run with no checkpoint starts fresh and records its tools anew)."""
    stored = await store.get(record_key(run_id)) if resumed else None
    if stored is None:
        return error
    try:
        recorded = ToolRecord.model_validate_json(stored.value)
    except ValidationError:
        return error  # settle() says the record is unreadable, if the run gets that far
    seen = recorded.agents.get(error.agent, {})
    for name in error.tools:
        if name in seen:
            return McpToolChangedError(error.agent, name, "is gone from its server")
    return error


async def settle(
    store: MemoryStore, run_id: str, tools: Mapping[str, Sequence[AnyTool]], *, resumed: bool
) -> dict[str, list[AnyTool]]:
    """The tools each agent gets this attempt. A fresh run records them; a resumed one gets
    the recorded ones, unchanged (``McpToolChangedError`` names the first that is not). A
    resumed run without a record (started before oma recorded tools) records them now."""
    current = of(tools)
    key = record_key(run_id)
    stored = await store.get(key) if resumed else None
    if stored is None:
        await store.set(key, current.model_dump_json())
        return {agent: list(found) for agent, found in tools.items()}
    try:
        recorded = ToolRecord.model_validate_json(stored.value)
    except ValidationError as exc:
        raise StoreCorruptError(
            key, f"the run's MCP tool record is unreadable ({exc.error_count()} problems)"
        ) from exc
    kept: dict[str, list[AnyTool]] = {}
    for agent, found in tools.items():
        seen = recorded.agents.get(agent, {})
        now = current.agents[agent]
        for name, was in sorted(seen.items()):
            if name not in now:
                raise McpToolChangedError(agent, name, "is gone from its server")
            if now[name] != was:
                raise McpToolChangedError(agent, name, "changed (schema, description or hints)")
        kept[agent] = [tool for tool in found if tool.name in seen]
    return kept
