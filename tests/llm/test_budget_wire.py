"""With a budget, each model call names itself to the provider (``X-Oma-Call-Key``) and sends
its ``maxTokens``; without one, no key is sent. Both SDKs, a loopback server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.local_run import run_spec
from oma.spec import RunSpec
from oma.tools import builtin_tools
from tests.llm import anthropic_wire
from tests.llm.openai_wire import completion
from tests.llm.wire_server import Reply, WireServer

PROVIDERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "anthropic": ("/v1/messages", "", anthropic_wire.message(anthropic_wire.text("ok"))),
    "openai": ("/v1/chat/completions", "/v1", completion("ok")),
}


def _spec(provider: str, base_url: str, budget: dict[str, int] | None) -> RunSpec:
    model = {
        "provider": provider,
        "name": "test-model",
        "baseURL": base_url,
        "apiKeyEnv": "LOCAL_MODEL_KEY",
        "maxRetries": 0,
        "maxTokens": 321,
    }
    data: dict[str, Any] = {
        "agents": [{"name": "clerk", "model": model}],
        "tasks": [{"title": "Say", "description": "Say ok."}],
        "store": {"memory": {}},
    }
    if budget is not None:
        data["budget"] = budget
    return RunSpec.model_validate(data)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("budget", [{"tokens": 100_000}, None])
async def test_a_budgeted_call_carries_its_key_and_its_max_tokens(
    provider: str,
    budget: dict[str, int] | None,
    server: WireServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")
    path, prefix, reply = PROVIDERS[provider]
    server.expect(path, Reply(body=reply))
    spec = _spec(provider, server.base_url + prefix, budget)
    outcome = await run_spec(
        spec, run_id="keyed", tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )
    assert outcome.result.success
    [sent] = server.received
    assert isinstance(sent.body, dict)
    limit = sent.body.get("max_tokens") or sent.body.get("max_completion_tokens")
    assert limit == 321
    task_id = outcome.result.tasks[0].id
    if budget is None:
        assert "x-oma-call-key" not in sent.headers
        assert outcome.result.budget is None
    else:
        assert sent.headers["x-oma-call-key"] == f"keyed:{task_id}:m1"
        assert outcome.result.budget is not None
        assert outcome.result.budget.spent.model_calls == 1


async def _budgeted(server: WireServer, tmp_path: Path, *replies: Reply) -> Any:
    server.expect("/v1/messages", *replies)
    spec = _spec("anthropic", server.base_url, {"tokens": 100_000})
    return await run_spec(
        spec, run_id="spend", tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )


async def test_a_call_the_provider_refused_costs_nothing_and_one_it_answered_badly_counts(
    server: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")
    refused = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    run = await _budgeted(server, tmp_path, Reply(400, refused))
    assert run.result.budget is not None
    spent = run.result.budget.spent
    assert (spent.model_calls, spent.tokens) == (0, 0)  # an HTTP error: released

    server.reset()
    unusable = anthropic_wire.message({"type": "mystery_block"})
    run = await _budgeted(server, tmp_path / "b", Reply(body=unusable))
    assert run.result.budget is not None
    spent = run.result.budget.spent
    assert (spent.model_calls, spent.lost_model_calls) == (1, 1)  # answered: billed
    assert spent.lost_tokens > 321 and run.result.budget.limits.tokens == 100_000


async def test_an_answer_without_usage_counts_at_its_reservation(
    server: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")
    body = anthropic_wire.message(anthropic_wire.text("ok"))
    del body["usage"]
    run = await _budgeted(server, tmp_path, Reply(body=body))
    assert run.result.success and run.result.budget is not None
    spent = run.result.budget.spent
    assert spent.model_calls == 1 and spent.input_tokens == spent.output_tokens == 0
    assert spent.unreported_tokens > 321 and spent.tokens == spent.unreported_tokens


async def test_a_call_key_is_sent_percent_encoded_whatever_the_run_id_holds(
    server: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run id is the user's: a newline in it must not end the header (or add one), a
    non-ASCII letter must not fail the call."""
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-test-key-000000000000")
    server.expect("/v1/messages", Reply(body=anthropic_wire.message(anthropic_wire.text("ok"))))
    spec = _spec("anthropic", server.base_url, {"tokens": 100_000})
    run_id = "zählung 1\nX-Injected: yes"
    outcome = await run_spec(
        spec, run_id=run_id, tools=builtin_tools(), default_store_path=tmp_path / "unused.json"
    )
    assert outcome.result.success
    [sent] = server.received
    task_id = outcome.result.tasks[0].id
    assert sent.headers["x-oma-call-key"] == f"z%C3%A4hlung%201%0AX-Injected:%20yes:{task_id}:m1"
    assert "x-injected" not in sent.headers
