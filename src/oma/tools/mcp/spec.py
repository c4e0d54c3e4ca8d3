"""An agent's MCP server in a run spec (``agents[].mcpServers[]``): where it is, how to reach
it, which of its tools the agent may use, and how a restart treats each."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from oma.pod_contract import is_reserved_env

# A header's name as HTTP allows it (RFC 9110 token); an environment variable's name.
HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class McpServerSpec(_Spec):
    """Exactly one of ``url`` (streamable HTTP) or ``command`` (stdio: a program in the runner
    image, started for the attempt and stopped after it)."""

    name: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$",
        description="Unique within the agent; the model sees each tool as <name>__<tool>.",
    )
    url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="The server's streamable HTTP endpoint, e.g. http://tools.team:8000/mcp.",
    )
    command: list[str] | None = Field(
        default=None,
        min_length=1,
        description="stdio: the program and its arguments (no shell), e.g. [python, -m, pkg].",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: variables set for the program (besides PATH, HOME and the like).",
    )
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP: header name -> the environment variable holding its value (a token "
        "from a Secret: a TeamRun names the Secret, the runner pod gets the variable).",
    )
    tools: list[str] | None = Field(
        default=None,
        description="The server's tools the agent may use, by the server's names (default: all "
        "it lists). A name the server does not list fails the attempt.",
    )
    idempotent: dict[str, bool] = Field(
        default_factory=dict,
        description="Per tool (server's name): true re-runs a call a crash left uncertain with "
        "the same key, false puts it to a reviewer. Default: from the tool's annotations "
        "(readOnlyHint, or idempotentHint without destructiveHint: re-run; else a reviewer).",
    )
    timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="Per call, and for connecting at the start."
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of 'url' or 'command'")
        if self.url is None and self.headers_from_env:
            raise ValueError(f"MCP server {self.name!r}: headersFromEnv is for 'url' servers")
        if self.command is None and self.env:
            raise ValueError(f"MCP server {self.name!r}: env is for 'command' servers")
        for header, variable in self.headers_from_env.items():
            _check(HEADER_NAME, header, "header name")
            _check(ENV_NAME, variable, "environment variable name")
            if is_reserved_env(variable):
                # The store URL and the model keys are not for a tool server's eyes.
                raise ValueError(
                    f"MCP server {self.name!r}: header {header} may not come from {variable}, "
                    "a variable of the runner pod contract; put the token in a variable of "
                    "your own"
                )
        for variable in self.env:
            _check(ENV_NAME, variable, "environment variable name")
        unknown = sorted(set(self.idempotent) - set(self.tools)) if self.tools is not None else []
        if unknown:
            raise ValueError(
                f"MCP server {self.name!r}: idempotent names tools not in its 'tools': {unknown}"
            )
        return self


def _check(pattern: str, value: Any, what: str) -> None:
    if not isinstance(value, str) or re.fullmatch(pattern, value) is None:
        raise ValueError(f"{value!r} is not a valid {what}")


def check_unique(servers: list[McpServerSpec], agent: str) -> None:
    """An agent's servers have distinct names (the model's tool names are made from them)."""
    names = [server.name for server in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"agent {agent!r}: MCP server names must be unique: {names}")
