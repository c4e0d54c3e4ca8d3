"""OpenAIAdapter through the real SDK against a loopback server speaking Chat Completions."""

from __future__ import annotations

import json
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

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
from oma.llm.openai_adapter import LOCAL_PLACEHOLDER_KEY, OpenAIAdapter
from tests.llm.openai_wire import PATH, call, completion
from tests.llm.wire_server import Reply, WireServer

KEY = "sk-proj-test-secret-0123456789"
FAST = {"retry-after-ms": "10"}  # the SDK honours it, so retries take milliseconds

WEATHER = ToolSpec(
    name="weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def ask(prompt: str = "Hi", **kwargs: Any) -> ChatRequest:
    user = LLMMessage(role="user", content=[TextBlock(text=prompt)])
    return ChatRequest(model="gpt-test-1", messages=[user], **kwargs)


MakeAdapter = Callable[..., OpenAIAdapter]


@pytest.fixture
async def make(server: WireServer) -> AsyncIterator[MakeAdapter]:
    made: list[OpenAIAdapter] = []

    def build(**kwargs: Any) -> OpenAIAdapter:
        options: dict[str, Any] = {
            "api_key": KEY,
            "base_url": f"{server.base_url}/v1",
            "max_retries": 2,
        }
        adapter = OpenAIAdapter("gpt-test-1", **{**options, **kwargs})
        made.append(adapter)
        return adapter

    yield build
    for adapter in made:
        await adapter.aclose()


async def test_text_answer(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=completion("Hello there.")))
    adapter = make()
    assert isinstance(adapter, LLMAdapter)

    response = await adapter.chat(ask("Hi", system="Be brief."))

    assert response.content == [TextBlock(text="Hello there.")]
    assert response.stop_reason == "stop"
    assert response.model == "gpt-test-1"
    [sent] = server.received
    assert sent.path == PATH
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "gpt-test-1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
    }


async def test_request_options(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=completion("ok")))

    await make().chat(ask(max_tokens=50, temperature=0.2))

    [sent] = server.received
    assert sent.body["max_completion_tokens"] == 50
    assert sent.body["temperature"] == 0.2


async def test_tool_call_answer(server: WireServer, make: MakeAdapter) -> None:
    reply = completion(
        "Let me check.", call("call_1", "weather", '{"city": "Oslo"}'), finish="tool_calls"
    )
    server.expect(PATH, Reply(body=reply))

    response = await make().chat(ask("Weather in Oslo?", tools=[WEATHER]))

    assert response.content == [
        TextBlock(text="Let me check."),
        ToolUseBlock(id="call_1", name="weather", input={"city": "Oslo"}),
    ]
    assert response.stop_reason == "tool_calls"
    [sent] = server.received
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]


async def test_two_turn_exchange_sends_tool_messages(server: WireServer, make: MakeAdapter) -> None:
    server.expect(
        PATH,
        Reply(
            body=completion(
                None,
                call("call_1", "weather", '{"city": "Oslo"}'),
                call("call_2", "weather", '{"city": "Bergen"}'),
                finish="tool_calls",
            )
        ),
        Reply(body=completion("Oslo 4°C, Bergen unknown.")),
    )
    adapter = make()
    request = ask("Weather in Oslo and Bergen?", tools=[WEATHER])
    first = await adapter.chat(request)
    results = LLMMessage(
        role="user",
        content=[
            ToolResultBlock(
                tool_use_id="call_1",
                content=[{"type": "text", "text": "4°C"}, {"type": "text", "text": "cloudy"}],
            ),
            ToolResultBlock(tool_use_id="call_2", content="station offline", is_error=True),
            TextBlock(text="Answer in one line."),
        ],
    )
    conversation = [*request.messages, first.message, results]

    second = await adapter.chat(request.model_copy(update={"messages": conversation}))

    assert second.message.text == "Oslo 4°C, Bergen unknown."
    assert len(server.received) == 2
    sent = server.received[1].body
    assert sent["messages"] == [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Bergen"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "4°C\ncloudy"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: station offline"},
        {"role": "user", "content": "Answer in one line."},
    ]
    assert sent["tools"][0]["function"]["name"] == "weather"
    # What the server received parses back to what the model asked for.
    args = [json.loads(c["function"]["arguments"]) for c in sent["messages"][1]["tool_calls"]]
    assert args == [{"city": "Oslo"}, {"city": "Bergen"}]


async def test_images_become_image_url_parts(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=completion("A cat.")))
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QQ=="},
    }
    user = LLMMessage.model_validate(
        {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}
    )

    await make().chat(ChatRequest(model="gpt-test-1", messages=[user]))

    assert server.received[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QQ=="}},
            ],
        }
    ]


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_status_is_retried_by_the_sdk(
    server: WireServer, make: MakeAdapter, status: int
) -> None:
    error = {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    server.expect(PATH, Reply(status, error, FAST), Reply(body=completion("ok")))

    response = await make().chat(ask())

    assert response.message.text == "ok"
    assert len(server.received) == 2


async def test_persistent_500_is_an_llm_error(server: WireServer, make: MakeAdapter) -> None:
    error = {"error": {"message": "boom", "type": "server_error", "code": None}}
    server.expect(PATH, *[Reply(500, error, {**FAST, "x-request-id": "req_9"})] * 3)

    with pytest.raises(LLMError) as caught:
        await make(max_retries=2).chat(ask())

    assert len(server.received) == 3
    message = str(caught.value)
    assert "\n" not in message
    for part in ("openai", "'gpt-test-1'", "HTTP 500", "after 2 retries", "boom", "req_9"):
        assert part in message


async def test_401_is_an_llm_error_without_the_key(server: WireServer, make: MakeAdapter) -> None:
    # OpenAI's real 401 quotes the key it rejected; it must not reach logs through us.
    error = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server.expect(PATH, Reply(401, error))

    with pytest.raises(LLMError) as caught:
        await make().chat(ask())

    assert len(server.received) == 1  # not retried
    shown = "".join(traceback.format_exception(caught.value))
    assert KEY not in shown
    assert "HTTP 401" in str(caught.value)
    assert "invalid_api_key" in str(caught.value)
    assert not isinstance(caught.value, LLMResponseError)


async def test_timeout_is_an_llm_error(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=completion("late"), delay=1.0))

    with pytest.raises(LLMError, match=r"timed out after 0.2s \(1 attempt\)"):
        await make(timeout=0.2, max_retries=0).chat(ask())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            completion(None, call("call_7", "weather", "{not json")),
            r"tool 'weather' call 'call_7' has arguments that are not valid JSON",
        ),
        (
            completion(None, call("call_8", "weather", "[1, 2]")),
            r"tool 'weather' call 'call_8' has arguments a list, expected a JSON object",
        ),
        (completion(None, {"type": "function", "function": {"name": "w"}}), "has no id"),
        ({**completion("x"), "choices": []}, "has no choices"),
        ({"id": "x", "model": "gpt-test-1"}, "has no choices"),
        ({**completion("x"), "choices": [{"index": 0}]}, r"choices\[0\]\.message is missing"),
        (completion(None), "has no text and no tool calls"),
        (completion(""), "has no text and no tool calls"),
        (b"<html>gateway</html>", "is not JSON"),
        (completion("x", usage={"prompt_tokens": -1}), "usage.prompt_tokens"),
    ],
)
async def test_malformed_output_is_a_response_error(
    server: WireServer, make: MakeAdapter, body: Any, expected: str
) -> None:
    server.expect(PATH, Reply(body=body))

    with pytest.raises(LLMResponseError, match=expected) as caught:
        await make().chat(ask())

    assert "gpt-test-1" in str(caught.value)


async def test_usage_mapping(server: WireServer, make: MakeAdapter) -> None:
    usage = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}
    without = completion("b")
    del without["usage"]
    server.expect(PATH, Reply(body=completion("a", usage=usage)), Reply(body=without))
    adapter = make()

    assert (await adapter.chat(ask())).usage == TokenUsage(input_tokens=1234, output_tokens=56)
    # Local servers often send no usage: zero, not an error.
    assert (await adapter.chat(ask())).usage == TokenUsage()


async def test_lenient_where_compatible_servers_differ(
    server: WireServer, make: MakeAdapter
) -> None:
    parts = completion(None, call("call_1", "ping", ""))
    parts["choices"][0]["message"]["content"] = [{"type": "text", "text": "pinging"}]
    server.expect(PATH, Reply(body=parts))

    response = await make().chat(ask())

    # Empty arguments mean "no arguments"; text may come as a list of text parts.
    assert response.content == [
        TextBlock(text="pinging"),
        ToolUseBlock(id="call_1", name="ping", input={}),
    ]


async def test_placeholder_key_for_local_servers(server: WireServer, make: MakeAdapter) -> None:
    server.expect(PATH, Reply(body=completion("ok")))

    await make(api_key=None).chat(ask())

    assert server.received[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


async def test_key_from_environment(
    server: WireServer, make: MakeAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.expect(PATH, Reply(body=completion("ok")))

    await make(api_key=None).chat(ask())

    assert server.received[0].headers["authorization"] == "Bearer sk-from-env"


def test_no_key_and_no_base_url_is_a_clear_error() -> None:
    with pytest.raises(LLMError, match="OPENAI_API_KEY") as caught:
        OpenAIAdapter("gpt-test-1")
    assert caught.value.transient is False  # configuration: running again cannot help
