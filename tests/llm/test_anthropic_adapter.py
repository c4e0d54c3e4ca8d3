"""AnthropicAdapter through the real SDK against a loopback server speaking the Messages API."""

from __future__ import annotations

import socket
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from oma.llm import (
    ChatRequest,
    LLMAdapter,
    LLMError,
    LLMMessage,
    LLMResponseError,
    TextBlock,
    TokenUsage,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from oma.llm.anthropic_adapter import LOCAL_PLACEHOLDER_KEY, AnthropicAdapter
from tests.llm.anthropic_wire import PATH, message, text
from tests.llm.wire_server import Reply, WireServer

KEY = "sk-ant-test-secret-0123456789"
FAST = {"retry-after-ms": "10"}  # the SDK honours it, so retries take milliseconds

WEATHER = ToolSpec(
    name="weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def tool_use(call_id: str, name: str, args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def ask(prompt: str = "Hi", **kwargs: Any) -> ChatRequest:
    user = LLMMessage(role="user", content=[TextBlock(text=prompt)])
    return ChatRequest(model="claude-test-1", messages=[user], **kwargs)


MakeAdapter = Callable[..., AnthropicAdapter]


@pytest.fixture
async def make(server: WireServer) -> AsyncIterator[MakeAdapter]:
    made: list[AnthropicAdapter] = []

    def build(**kwargs: Any) -> AnthropicAdapter:
        options: dict[str, Any] = {"api_key": KEY, "base_url": server.base_url, "max_retries": 2}
        adapter = AnthropicAdapter("claude-test-1", **{**options, **kwargs})
        made.append(adapter)
        return adapter

    yield build
    for adapter in made:
        await adapter.aclose()


async def test_text_answer(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=message(text("Hello there."))))
    adapter = make()
    assert isinstance(adapter, LLMAdapter)

    response = await adapter.chat(ask("Hi", system="Be brief."))

    assert response.content == [TextBlock(text="Hello there.")]
    assert response.message.text == "Hello there."
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-test-1"
    [sent] = server.received
    assert sent.path == PATH
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert "anthropic-version" in sent.headers
    assert sent.body == {
        "model": "claude-test-1",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    }


async def test_request_options(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=message(text("a"))), Reply(body=message(text("b"))))
    adapter = make(max_tokens=100)

    await adapter.chat(ask())
    await adapter.chat(ask(max_tokens=50, temperature=0.2))

    first, second = (r.body for r in server.received)
    # The adapter's limit is the default; an explicit one on the request wins.
    assert first["max_tokens"] == 100
    assert "temperature" not in first
    assert "system" not in first
    assert "tools" not in first
    assert second["max_tokens"] == 50
    assert second["temperature"] == 0.2


async def test_tool_use_answer(server: WireServer, make: MakeAdapter) -> None:
    reply = message(
        text("Let me check."), tool_use("toolu_01", "weather", {"city": "Oslo"}), stop="tool_use"
    )
    server.expect(PATH, Reply(body=reply))

    response = await make().chat(ask("Weather in Oslo?", tools=[WEATHER]))

    assert response.content == [
        TextBlock(text="Let me check."),
        ToolUseBlock(id="toolu_01", name="weather", input={"city": "Oslo"}),
    ]
    assert response.stop_reason == "tool_use"
    [sent] = server.received
    assert sent.body["tools"] == [
        {
            "name": "weather",
            "description": "Current weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]


async def test_two_turn_exchange_sends_tool_result(server: WireServer, make: MakeAdapter) -> None:
    server.expect(
        PATH,
        Reply(body=message(tool_use("toolu_01", "weather", {"city": "Oslo"}), stop="tool_use")),
        Reply(body=message(text("It is 4°C in Oslo."))),
    )
    adapter = make()
    request = ask("Weather in Oslo?", tools=[WEATHER])
    first = await adapter.chat(request)
    result = ToolResultBlock(
        tool_use_id="toolu_01", content=[{"type": "text", "text": "4°C, cloudy"}], is_error=True
    )
    conversation = [
        *request.messages,
        first.message,
        LLMMessage(role="user", content=[result]),
    ]

    second = await adapter.chat(request.model_copy(update={"messages": conversation}))

    assert second.message.text == "It is 4°C in Oslo."
    assert len(server.received) == 2
    assert server.received[1].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Oslo"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "4°C, cloudy"}],
                    "is_error": True,
                }
            ],
        },
    ]


@pytest.mark.parametrize("status", [429, 500, 529])
async def test_transient_status_is_retried_by_the_sdk(
    server: WireServer, make: MakeAdapter, status: int
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    server.expect(PATH, Reply(status, error, FAST), Reply(body=message(text("ok"))))

    response = await make().chat(ask())

    assert response.message.text == "ok"
    assert len(server.received) == 2


async def test_persistent_500_is_an_llm_error(server: WireServer, make: MakeAdapter) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    server.expect(PATH, *[Reply(500, error, {**FAST, "request-id": "req_9"})] * 3)

    with pytest.raises(LLMError) as caught:
        await make(max_retries=2).chat(ask())

    assert len(server.received) == 3
    text_ = str(caught.value)
    assert "\n" not in text_
    for part in ("anthropic", "'claude-test-1'", "HTTP 500", "after 2 retries", "boom", "req_9"):
        assert part in text_


async def test_401_is_an_llm_error_without_the_key(server: WireServer, make: MakeAdapter) -> None:
    # Some servers echo the credential they rejected; it must not reach logs through us.
    error = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {KEY}"}}
    server.expect(PATH, Reply(401, error))

    with pytest.raises(LLMError) as caught:
        await make().chat(ask())

    assert len(server.received) == 1  # not retried
    shown = "".join(traceback.format_exception(caught.value))
    assert KEY not in shown
    assert "HTTP 401" in str(caught.value)
    assert "authentication_error" in str(caught.value)
    assert not isinstance(caught.value, LLMResponseError)


async def test_unreachable_server_is_an_llm_error(server: WireServer) -> None:
    # A port that was free a moment ago: nothing listens there (loopback only).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = AnthropicAdapter("m", base_url=f"http://127.0.0.1:{port}", max_retries=0)
    try:
        with pytest.raises(LLMError, match="unreachable"):
            await adapter.chat(ask())
    finally:
        await adapter.aclose()


async def test_timeout_is_an_llm_error(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=message(text("late")), delay=1.0))

    with pytest.raises(LLMError, match=r"timed out after 0.2s \(1 attempt\)"):
        await make(timeout=0.2, max_retries=0).chat(ask())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (message(content="just text"), "'content' is a str, expected a list"),
        (message(text("a"), {"type": "banana"}), r"content\[1\] has unsupported block type"),
        (message(tool_use("toolu_1", "weather", "Oslo")), "has input a str, expected an object"),
        (message(tool_use("", "weather", {})), "has no id"),
        (message(), "has no text or tool_use"),
        (message(text("")), "has no text or tool_use"),
        (["not", "an", "object"], "is not a JSON object"),
        (b"<html>gateway</html>", "is not JSON"),
        (message(text("a"), usage={"input_tokens": "many"}), "usage.input_tokens"),
    ],
)
async def test_malformed_output_is_a_response_error(
    server: WireServer, make: MakeAdapter, body: Any, expected: str
) -> None:
    server.expect(PATH, Reply(body=body))

    with pytest.raises(LLMResponseError, match=expected) as caught:
        await make().chat(ask())

    assert "claude-test-1" in str(caught.value)


async def test_usage_mapping(server: WireServer, make: MakeAdapter) -> None:
    usage = {"input_tokens": 1234, "output_tokens": 56, "cache_read_input_tokens": 9}
    server.expect(
        PATH,
        Reply(body=message(text("a"), usage=usage)),
        Reply(body={k: v for k, v in message(text("b")).items() if k != "usage"}),
    )
    adapter = make()

    assert (await adapter.chat(ask())).usage == TokenUsage(input_tokens=1234, output_tokens=56)
    assert (await adapter.chat(ask())).usage == TokenUsage()


async def test_thinking_blocks_and_empty_text_are_dropped(
    server: WireServer, make: MakeAdapter
) -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    server.expect(PATH, Reply(body=message(thinking, text(""), tool_use("t1", "weather", {}))))

    response = await make().chat(ask())

    assert response.content == [ToolUseBlock(id="t1", name="weather", input={})]


async def test_placeholder_key_for_local_servers(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=message(text("ok"))))

    await make(api_key=None).chat(ask())

    assert server.received[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


async def test_key_from_environment(
    server: WireServer, make: MakeAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    server.expect(PATH, Reply(body=message(text("ok"))))

    await make(api_key=None).chat(ask())

    assert server.received[0].headers["authorization"] == "Bearer sk-from-env"


def test_no_credentials_at_all_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An empty home, so no credential profile on this machine is discovered.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY") as caught:
        AnthropicAdapter("claude-test-1")
    assert caught.value.transient is False  # configuration: running again cannot help


def test_credentials_that_do_not_load_are_an_llm_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_PROFILE", "nope")
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    with pytest.raises(LLMError, match="credentials did not load") as caught:
        AnthropicAdapter("claude-test-1")
    assert caught.value.transient is False


async def test_passed_in_client_is_used_and_left_open(server: WireServer) -> None:
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
    server.expect(PATH, Reply(body=message(text("ok"))))
    adapter = AnthropicAdapter("claude-test-1", client=client)
    try:
        assert (await adapter.chat(ask())).message.text == "ok"
        assert adapter.max_retries == 0
        await adapter.aclose()
        assert not client.is_closed()
    finally:
        await client.close()
