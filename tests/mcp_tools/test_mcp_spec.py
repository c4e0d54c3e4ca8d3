"""The run spec's ``mcpServers`` and how a restart treats each MCP tool (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from oma.spec import RunSpec
from oma.tools.mcp import McpServerSpec, model_tool_name
from oma.tools.mcp.recovery import MODEL_TOOL_NAME, is_idempotent


def _agent(*servers: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "clerk",
        "model": {"provider": "scripted", "script": [{"text": "x"}]},
        "mcpServers": list(servers),
    }


def _spec(*servers: dict[str, Any], **extra: Any) -> RunSpec:
    return RunSpec.model_validate(
        {"agents": [_agent(*servers)], "tasks": [{"title": "t", "description": "d"}], **extra}
    )


def test_a_server_takes_a_url_or_a_command_and_defaults_to_every_tool() -> None:
    spec = _spec({"name": "crm", "url": "http://127.0.0.1:9/mcp"})
    server = spec.agents[0].mcp_servers[0]
    assert server.tools is None and server.timeout_seconds == 30 and server.idempotent == {}
    stdio = McpServerSpec.model_validate({"name": "fs", "command": ["python", "-m", "x"]})
    assert stdio.url is None


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"name": "a"}, "exactly one of 'url' or 'command'"),
        ({"name": "a", "url": "http://h/mcp", "command": ["x"]}, "exactly one of"),
        ({"name": "a", "url": "file:///etc/passwd"}, "should match pattern"),
        ({"name": "A_b", "url": "http://h/mcp"}, "should match pattern"),
        ({"name": "a", "command": []}, "at least 1 item"),
        ({"name": "a", "url": "http://h/mcp", "env": {"X": "1"}}, "env is for 'command'"),
        ({"name": "a", "command": ["x"], "headersFromEnv": {"A": "B"}}, "is for 'url'"),
        ({"name": "a", "url": "http://h/mcp", "headersFromEnv": {"Bad Header": "T"}}, "header"),
        ({"name": "a", "url": "http://h/mcp", "headersFromEnv": {"X": "1BAD"}}, "variable"),
        (
            {"name": "a", "url": "http://h/mcp", "headersFromEnv": {"X": "OMA_STORE_URL"}},
            "runner pod contract",
        ),
        (
            {"name": "a", "url": "http://h/mcp", "headersFromEnv": {"X": "OMA_MODEL_KEY_A"}},
            "runner pod contract",
        ),
        (
            {"name": "a", "url": "http://h/mcp", "tools": ["x"], "idempotent": {"y": True}},
            "not in its 'tools'",
        ),
        ({"name": "a", "url": "http://h/mcp", "timeoutSeconds": 0}, "greater than 0"),
        ({"name": "a", "url": "http://h/mcp", "bogus": 1}, "Extra inputs"),
    ],
)
def test_a_bad_server_is_refused_with_the_spec(server: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        _spec(server)


def test_an_agents_servers_have_distinct_names() -> None:
    with pytest.raises(ValidationError, match="MCP server names must be unique"):
        _spec({"name": "a", "url": "http://h/mcp"}, {"name": "a", "command": ["x"]})


def test_the_coordinator_takes_no_mcp_servers() -> None:
    coordinator = _agent({"name": "a", "url": "http://h/mcp"}) | {"name": "lead"}
    with pytest.raises(ValidationError, match="coordinator plans and takes no MCP servers"):
        RunSpec.model_validate(
            {"mode": "team", "goal": "g", "agents": [_agent()], "coordinator": coordinator}
        )


@pytest.mark.parametrize(
    ("read_only", "idempotent", "destructive", "override", "rerun"),
    [
        (None, None, None, None, False),  # says nothing: a reviewer decides
        (None, True, None, None, True),
        (None, True, False, None, True),
        (None, True, True, None, False),  # idempotent but destructive: not re-run by itself
        (None, False, None, None, False),
        (True, None, None, None, True),  # changes nothing
        (None, None, None, True, True),  # the spec's word wins
        (True, True, None, False, False),
    ],
)
def test_a_call_is_rerun_after_an_uncertain_restart_only_when_safe(
    read_only: bool | None,
    idempotent: bool | None,
    destructive: bool | None,
    override: bool | None,
    rerun: bool,
) -> None:
    decided = is_idempotent(
        read_only=read_only, idempotent=idempotent, destructive=destructive, override=override
    )
    assert decided is rerun


def test_the_model_sees_server_and_tool_in_one_name_both_apis_take() -> None:
    assert model_tool_name("crm", "find_contact") == "crm__find_contact"
    assert MODEL_TOOL_NAME.fullmatch(model_tool_name("crm", "find.contact")) is None
    assert MODEL_TOOL_NAME.fullmatch(model_tool_name("crm", "x" * 60)) is None
