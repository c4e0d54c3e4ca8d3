"""What both SDK adapters share (oma.llm.sdk_adapter), checked once for each provider.

Each provider's own tests cover its wire shapes; these cover the base's behaviour wherever it was
tested for one provider only, so that neither provider can drift from it. Real SDKs, real sockets.
"""

from __future__ import annotations

import socket
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from oma.llm import ChatRequest, LLMError, LLMMessage, TextBlock
from oma.llm.anthropic_adapter import AnthropicAdapter
from oma.llm.openai_adapter import OpenAIAdapter
from oma.llm.sdk_adapter import SDKAdapter
from tests.llm import anthropic_wire, openai_wire
from tests.llm.wire_server import Reply, WireServer

KEY = "sk-shared-test-secret-0123456789"
FAST = {"retry-after-ms": "10"}  # the SDK honours it, so retries take milliseconds


@dataclass(frozen=True)
class Provider:
    name: str
    adapter: type[AnthropicAdapter] | type[OpenAIAdapter]
    client: Callable[..., Any]  # the SDK's client class
    model: str
    path: str
    suffix: str  # what the SDK's base_url carries after the host
    answer: Callable[[str], dict[str, Any]]  # a reply body saying this text
    error: Callable[[str], dict[str, Any]]  # an error body with this message


PROVIDERS = [
    Provider(
        name="anthropic",
        adapter=AnthropicAdapter,
        client=anthropic.AsyncAnthropic,
        model="claude-test-1",
        path=anthropic_wire.PATH,
        suffix="",
        answer=lambda text: anthropic_wire.message(anthropic_wire.text(text)),
        error=lambda message: {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        },
    ),
    Provider(
        name="openai",
        adapter=OpenAIAdapter,
        client=openai.AsyncOpenAI,
        model="gpt-test-1",
        path=openai_wire.PATH,
        suffix="/v1",
        answer=lambda text: openai_wire.completion(text),
        error=lambda message: {"error": {"message": message, "type": "invalid_request_error"}},
    ),
]

MakeAdapter = Callable[..., SDKAdapter[Any]]


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    chosen: Provider = request.param
    return chosen


@pytest.fixture
async def make(server: WireServer, provider: Provider) -> AsyncIterator[MakeAdapter]:
    made: list[SDKAdapter[Any]] = []

    def build(**kwargs: Any) -> SDKAdapter[Any]:
        options: dict[str, Any] = {"api_key": KEY, "base_url": server.base_url + provider.suffix}
        adapter = provider.adapter(provider.model, **{**options, **kwargs})
        made.append(adapter)
        return adapter

    yield build
    for adapter in made:
        await adapter.aclose()


def ask(provider: Provider) -> ChatRequest:
    user = LLMMessage(role="user", content=[TextBlock(text="Hi")])
    return ChatRequest(model=provider.model, messages=[user])


@pytest.mark.parametrize(("retries", "attempts"), [(0, "1 attempt"), (1, "2 attempts")])
async def test_unreachable_server(provider: Provider, retries: int, attempts: str) -> None:
    # A port that was free a moment ago: nothing listens there (loopback only).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}{provider.suffix}"
    adapter = provider.adapter(provider.model, base_url=base_url, max_retries=retries)
    try:
        with pytest.raises(LLMError) as caught:
            await adapter.chat(ask(provider))
    finally:
        await adapter.aclose()

    shown = str(caught.value)
    assert shown.startswith(f"{provider.name} model '{provider.model}' at {base_url}")
    assert f"unreachable ({attempts}): " in shown
    # A connection error carries no response body that could echo the key: it stays chained.
    assert isinstance(caught.value.__cause__, provider.adapter.errors.connection)


@pytest.mark.parametrize(
    ("status", "retries", "requests", "said"),
    [
        (400, 2, 1, "answered HTTP 400: "),
        (401, 2, 1, "answered HTTP 401 (check the API key): "),
        (403, 2, 1, "answered HTTP 403 (check the API key): "),
        (429, 2, 3, "answered HTTP 429 after 2 retries: "),
        (429, 1, 2, "answered HTTP 429 after 1 retry: "),
        (413, 2, 1, "answered HTTP 413: "),
        (503, 0, 1, "answered HTTP 503: "),
    ],
)
async def test_status_errors_say_whether_the_sdk_retried(
    server: WireServer,
    provider: Provider,
    make: MakeAdapter,
    status: int,
    retries: int,
    requests: int,
    said: str,
) -> None:
    reply = Reply(status, provider.error("no"), {**FAST, "request-id": "r1", "x-request-id": "r1"})
    server.expect(provider.path, *[reply] * requests)

    with pytest.raises(LLMError) as caught:
        await make(max_retries=retries).chat(ask(provider))

    assert len(server.received) == requests
    assert server.pending == 0
    assert f"{said}invalid_request_error: no [request-id r1]" in str(caught.value)
    # A refused request (key, model, shape) fails the same way again; the rest may pass.
    assert caught.value.transient is (status not in (400, 401, 403, 413))


async def test_the_key_is_kept_out_of_status_errors(
    server: WireServer, provider: Provider, make: MakeAdapter
) -> None:
    # Any error body may quote the credential the server saw, not only a 401's.
    server.expect(provider.path, Reply(400, provider.error(f"bad request from {KEY}\n(again)")))

    with pytest.raises(LLMError) as caught:
        await make().chat(ask(provider))

    assert str(caught.value).endswith("invalid_request_error: bad request from *** (again)")
    # The SDK's exception quotes the body too, so it is neither chained nor shown as context.
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert KEY not in "".join(traceback.format_exception(caught.value))


async def test_a_key_where_a_long_error_is_cut_leaves_no_part_of_itself(
    server: WireServer, provider: Provider, make: MakeAdapter
) -> None:
    """Error details are cut to one line of 300 characters: after the key is redacted, so a
    key that straddles the cut cannot leave its first half in the message."""
    for offset in range(245, 275, 7):  # the key starts before the cut and ends after it
        server.expect(provider.path, Reply(400, provider.error("x" * offset + KEY + " tail")))
        with pytest.raises(LLMError) as caught:
            await make().chat(ask(provider))
        assert KEY[:4] not in str(caught.value), offset


async def test_a_passed_in_client_brings_its_settings_and_is_left_open(
    server: WireServer, provider: Provider
) -> None:
    base_url = server.base_url + provider.suffix
    client = provider.client(api_key=KEY, base_url=base_url, max_retries=0, timeout=7.0)
    server.expect(provider.path, Reply(body=provider.answer("ok")))
    # The arguments a client already settles are ignored, so error messages report the client's.
    adapter = provider.adapter(provider.model, client=client, timeout=60.0, max_retries=5)
    try:
        assert (await adapter.chat(ask(provider))).message.text == "ok"
        assert (adapter.max_retries, adapter.timeout) == (0, 7.0)
        assert adapter.base_url.startswith(base_url)
        await adapter.aclose()
        assert not client.is_closed()
    finally:
        await client.close()


async def test_an_anthropic_auth_token_is_sent_and_redacted(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The token is Anthropic's second credential: it must win over the placeholder key, and it
    # is as secret as an API key.
    token = "sk-ant-token-secret-0123456789"
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", token)
    provider = PROVIDERS[0]
    server.expect(provider.path, Reply(401, provider.error(f"token {token} expired")))
    adapter = AnthropicAdapter(provider.model, base_url=server.base_url)
    try:
        with pytest.raises(LLMError) as caught:
            await adapter.chat(ask(provider))
    finally:
        await adapter.aclose()

    assert server.received[0].headers["authorization"] == f"Bearer {token}"
    assert "token *** expired" in str(caught.value)
    assert token not in "".join(traceback.format_exception(caught.value))


async def test_an_openai_admin_key_is_redacted(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK reads OPENAI_ADMIN_KEY into every client it makes; a server may echo it too.
    admin = "sk-admin-secret-0123456789"
    monkeypatch.setenv("OPENAI_ADMIN_KEY", admin)
    provider = PROVIDERS[1]
    server.expect(provider.path, Reply(400, provider.error(f"admin {admin} not allowed here")))
    adapter = OpenAIAdapter(provider.model, api_key=KEY, base_url=server.base_url + "/v1")
    try:
        with pytest.raises(LLMError) as caught:
            await adapter.chat(ask(provider))
    finally:
        await adapter.aclose()
    assert "admin *** not allowed here" in str(caught.value)


async def test_a_server_that_says_do_not_retry_is_not_said_to_be_retried(
    server: WireServer, provider: Provider, make: MakeAdapter
) -> None:
    # Both SDKs obey x-should-retry: a 503 with "false" is sent once, and the error says so.
    headers = {**FAST, "x-should-retry": "false"}
    server.expect(provider.path, Reply(503, provider.error("busy"), headers))
    with pytest.raises(LLMError) as caught:
        await make(max_retries=2).chat(ask(provider))
    assert len(server.received) == 1
    assert "answered HTTP 503: " in str(caught.value) and "retries" not in str(caught.value)
