"""A provider outage parks a run instead of failing it: a model call that still fails
transiently after the SDK's retries ends the attempt (``MODEL_UNAVAILABLE``, exit 14) at its
last boundary, and the next attempt resumes there without running committed tools again. A
request the provider refuses as such still fails its task. Real SDKs, a loopback server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oma.errors import ModelUnavailableError
from oma.local_run import run_spec
from oma.pod_contract import Exit, exit_for_error
from oma.spec import RunSpec
from oma.tools import builtin_tools
from tests.llm import anthropic_wire
from tests.llm.openai_wire import call, completion
from tests.llm.wire_server import Reply, WireServer

FAST = {"retry-after-ms": "10"}  # the SDKs honour it, so their retries take milliseconds
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _spec(tmp_path: Path, model: dict[str, Any]) -> RunSpec:
    return RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": "clerk",
                    "tools": ["ledger_append"],
                    "model": {"apiKeyEnv": "LOCAL_MODEL_KEY", "maxRetries": 1, **model},
                }
            ],
            "tasks": [{"title": "Pay", "description": "Record the payment."}],
            "store": {"file": {"path": str(tmp_path / "store.json")}},
        }
    )


async def _run(spec: RunSpec, tmp_path: Path) -> Any:
    return await run_spec(
        spec, run_id="outage", tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )


def _ledger(tmp_path: Path) -> list[str]:
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line)["key"].rsplit(":", 1)[1] for line in lines]


@pytest.fixture(autouse=True)
def _keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")


async def test_an_anthropic_outage_parks_the_run_and_the_next_attempt_resumes_it(
    server: WireServer, tmp_path: Path
) -> None:
    spec = _spec(
        tmp_path,
        {"provider": "anthropic", "name": "claude-test-1", "baseURL": server.base_url},
    )
    use = {"type": "tool_use", "id": "toolu_1", "name": "ledger_append", "input": {"entry": "x"}}
    server.expect(
        anthropic_wire.PATH,
        Reply(body=anthropic_wire.message(use, stop="tool_use")),
        *[Reply(529, OVERLOADED, FAST)] * 2,  # the call after the tool: the SDK tries twice
    )
    with pytest.raises(ModelUnavailableError) as caught:
        await _run(spec, tmp_path)
    assert exit_for_error(caught.value) == Exit.MODEL_UNAVAILABLE
    assert "HTTP 529" in caught.value.provider_message
    assert "Overloaded" in caught.value.provider_message
    assert _ledger(tmp_path) == ["toolu_1"]

    server.expect(
        anthropic_wire.PATH, Reply(body=anthropic_wire.message(anthropic_wire.text("ok")))
    )
    resumed = await _run(spec, tmp_path)
    assert resumed.resumed and resumed.result.success
    assert resumed.result.tasks[0].result == "ok"
    assert _ledger(tmp_path) == ["toolu_1"]  # committed before the outage: not run again
    assert server.pending == 0


async def test_an_openai_outage_parks_the_run_too(server: WireServer, tmp_path: Path) -> None:
    spec = _spec(
        tmp_path, {"provider": "openai", "name": "gpt-test-1", "baseURL": f"{server.base_url}/v1"}
    )
    busy = {"error": {"message": "The server is overloaded", "type": "server_error"}}
    server.expect(
        "/v1/chat/completions",
        Reply(
            body=completion(None, call("c1", "ledger_append", {"entry": "x"}), finish="tool_calls")
        ),
        *[Reply(503, busy, FAST)] * 2,
    )
    with pytest.raises(ModelUnavailableError, match="HTTP 503"):
        await _run(spec, tmp_path)
    server.expect("/v1/chat/completions", Reply(body=completion("done")))
    resumed = await _run(spec, tmp_path)
    assert resumed.result.success and _ledger(tmp_path) == ["c1"]


async def test_a_request_the_provider_refuses_still_fails_the_task(
    server: WireServer, tmp_path: Path
) -> None:
    spec = _spec(
        tmp_path,
        {"provider": "anthropic", "name": "claude-test-1", "baseURL": server.base_url},
    )
    refused = {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
    server.expect(anthropic_wire.PATH, Reply(401, refused))
    run = await _run(spec, tmp_path)
    assert run.exit_code == Exit.PERMANENT and run.result.status.code == "error"
    assert "HTTP 401" in (run.result.tasks[0].result or "")


async def test_an_outage_while_the_coordinator_plans_or_synthesizes_parks_the_run_too(
    server: WireServer, tmp_path: Path
) -> None:
    model = {"provider": "anthropic", "name": "claude-test-1", "baseURL": server.base_url}
    agent = {"apiKeyEnv": "LOCAL_MODEL_KEY", "maxRetries": 1, **model}
    spec = RunSpec.model_validate(
        {
            "mode": "team",
            "goal": "Say hello.",
            "agents": [{"name": "clerk", "model": agent}],
            "coordinator": {"name": "lead", "model": agent},
            "store": {"file": {"path": str(tmp_path / "store.json")}},
        }
    )
    plan = '[{"title": "Greet", "description": "Say hello.", "assignee": "clerk"}]'
    overloaded = [Reply(529, OVERLOADED, FAST)] * 2
    server.expect(anthropic_wire.PATH, *overloaded)  # planning: the SDK tries twice
    with pytest.raises(ModelUnavailableError, match="HTTP 529"):
        await _run(spec, tmp_path)

    text = anthropic_wire.text
    server.expect(
        anthropic_wire.PATH,
        Reply(body=anthropic_wire.message(text(plan))),  # the plan
        Reply(body=anthropic_wire.message(text("hello"))),  # the task
        *overloaded,  # synthesis
    )
    with pytest.raises(ModelUnavailableError, match="HTTP 529"):
        await _run(spec, tmp_path)

    server.expect(anthropic_wire.PATH, Reply(body=anthropic_wire.message(text("all said"))))
    resumed = await _run(spec, tmp_path)
    assert resumed.resumed and resumed.result.success, resumed.result.status
    assert resumed.result.agent_results["coordinator"].output == "all said"
    assert server.pending == 0
