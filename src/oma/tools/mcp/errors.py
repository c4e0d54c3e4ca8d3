"""What can go wrong with an MCP server, by whether waiting can fix it."""

from __future__ import annotations

from oma.errors import AttemptInterruptedError, OmaError, ToolChangedError


class McpUnavailableError(AttemptInterruptedError):
    """An MCP server could not be reached at an attempt's start, or the connection to it was
    lost during a call: transient. The attempt ends (a call in flight is uncertain: an
    idempotent tool runs again with the same key, another goes to a reviewer) and the next
    attempt resumes from the checkpoint."""

    code = "MCP_UNAVAILABLE"
    transient = True


class McpToolError(OmaError):
    """An MCP server's tools do not fit the spec (an allow-listed tool it does not offer, a
    name the models cannot take): permanent until the spec or the server changes."""

    code = "MCP_TOOL_INVALID"


class McpToolNotOfferedError(McpToolError):
    """An allow-listed tool the server does not offer. ``agent`` and ``tools`` (model tool
    names, ``<server>__<tool>``) say which: a resumed run that recorded one of them meets a tool
    gone from its server (``McpToolChangedError``: the run holds), a new run a spec to fix."""

    code = "MCP_TOOL_NOT_OFFERED"

    def __init__(self, agent: str, tools: list[str], message: str) -> None:
        self.agent, self.tools = agent, tools
        super().__init__(message)


class McpToolChangedError(ToolChangedError):
    """A resumed attempt found a tool the run recorded at its start changed or gone on its
    server: the run holds rather than call a different tool under the same name (exit 15; the
    operator tries again with backoff, for ``retryPolicy.toolChangeSeconds``). Restore the
    server's tool, or start a new run."""

    code = "MCP_TOOL_CHANGED"

    def __init__(self, agent: str, tool: str, what: str) -> None:
        super().__init__(
            agent,
            tool,
            f"agent {agent!r}: MCP tool {tool!r} {what} since the run recorded its tools; "
            "nothing was called. Restore the tool on its server and the run goes on (a "
            "TeamRun tries again by itself), or start a new run (another run id) to use the "
            "server's tools as they are now",
        )
