"""A whole run through the real OpenAI SDK: spec -> adapter -> tool call -> result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oma.local_run import run_spec
from oma.spec import RunSpec
from oma.tools import builtin_tools
from tests.llm.openai_wire import call, completion
from tests.llm.wire_server import Reply, WireServer


async def test_a_spec_with_an_openai_model_runs_its_tool_once(
    server: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")
    server.expect(
        "/v1/chat/completions",
        Reply(
            body=completion(
                None, call("call_9", "ledger_append", {"entry": "paid"}), finish="tool_calls"
            )
        ),
        Reply(body=completion("Recorded the payment.")),
    )
    spec = RunSpec.model_validate(
        {
            "runId": "sdk-run",
            "agents": [
                {
                    "name": "clerk",
                    "tools": ["ledger_append"],
                    "model": {
                        "provider": "openai",
                        "name": "gpt-test-1",
                        "baseURL": f"{server.base_url}/v1",
                        "apiKeyEnv": "LOCAL_MODEL_KEY",
                        "maxRetries": 0,
                    },
                }
            ],
            "tasks": [{"title": "Pay", "description": "Record the payment."}],
            "store": {"memory": {}},
        }
    )
    outcome = await run_spec(
        spec, run_id="sdk-run", tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )
    assert outcome.result.success and outcome.result.tasks[0].result == "Recorded the payment."
    ledger = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert [row["key"].split(":")[-1] for row in ledger] == ["call_9"]
    first, second = server.received
    assert first.headers["authorization"] == "Bearer sk-local-test-key-000000000000"
    assert isinstance(second.body, dict)
    tool_messages = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["tool_call_id"] == "call_9"
    assert "recorded paid" in tool_messages[0]["content"]
