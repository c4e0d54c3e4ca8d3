"""Anthropic Messages API through the official SDK (``anthropic.AsyncAnthropic``).

Our content blocks are already Anthropic-shaped, so a request goes out nearly verbatim. The work
here is on the way back: the SDK does not validate response bodies, so we read the raw JSON and
check it ourselves, and SDK failures become one-line ``LLMError`` messages without the API key.
"""

from __future__ import annotations

import os
from typing import Any, cast

import anthropic
from anthropic.types import MessageParam, ToolParam

from oma.llm import output_json
from oma.llm.adapter import LLMError, LLMResponseError
from oma.llm.types import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    TextBlock,
    TokenUsage,
    ToolUseBlock,
)

# Sent when a base_url is configured but no key exists: local compatible servers usually ignore
# authentication, but the SDK refuses to send a request without some credential.
LOCAL_PLACEHOLDER_KEY = "oma-no-key"

# Statuses the SDK retries by itself (its `_should_retry`); an error with one of them means the
# retries are used up, which the message says so nobody adds another retry loop around it.
_RETRIED_STATUSES = frozenset({408, 409, 429})

# Blocks we never request (extended thinking is off) and cannot represent; a compatible server
# may still emit them, and dropping them loses nothing the next request needs.
_IGNORED_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})


class AnthropicAdapter:
    """``LLMAdapter`` for the Anthropic Messages API or any server speaking it."""

    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = 4096,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self._owns_client = client is None
        if client is None:
            key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
            local = base_url or os.environ.get("ANTHROPIC_BASE_URL")
            if key is None and local and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
                key = LOCAL_PLACEHOLDER_KEY
            # With key None the SDK still looks for ANTHROPIC_AUTH_TOKEN and credential profiles.
            try:
                client = anthropic.AsyncAnthropic(
                    api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
                )
            except anthropic.AnthropicError as err:  # e.g. a named profile that does not load
                raise LLMError(
                    f"anthropic adapter for model {model!r}: credentials did not load: {err}"
                ) from err
            if client.api_key is None and client.auth_token is None and client.credentials is None:
                raise LLMError(
                    f"anthropic adapter for model {model!r} has no credentials: pass api_key, "
                    "set ANTHROPIC_API_KEY, or set base_url for a local server that needs none"
                )
        self._client = client
        # A passed-in client brings its own settings; error messages should report those.
        self.max_retries = client.max_retries
        if isinstance(client.timeout, int | float):
            self.timeout = float(client.timeout)

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    @property
    def _attempts(self) -> str:
        return "1 attempt" if self.max_retries == 0 else f"{self.max_retries + 1} attempts"

    async def aclose(self) -> None:
        """Close the HTTP connections, unless the client was passed in (its owner closes it)."""
        if self._owns_client:
            await self._client.close()

    async def chat(self, request: ChatRequest) -> ChatResponse:
        model = request.model or self.model
        # ChatRequest always carries a max_tokens; only an explicit one overrides the adapter's.
        max_tokens = (
            request.max_tokens if "max_tokens" in request.model_fields_set else self.max_tokens
        )
        messages = cast(list[MessageParam], [m.to_wire() for m in request.messages])
        tools = cast(list[ToolParam], [t.model_dump() for t in request.tools])
        # This SDK version has no `temperature` argument; the API still accepts the field.
        extra = {"temperature": request.temperature} if request.temperature is not None else None
        try:
            raw = await self._client.messages.with_raw_response.create(
                model=model,
                max_tokens=max_tokens,
                messages=messages,
                system=request.system if request.system else anthropic.omit,
                tools=tools if tools else anthropic.omit,
                extra_body=extra,
            )
            payload = await raw.read()
        except anthropic.APIError as err:
            raise self._translate(err, model) from _safe_cause(err)
        return parse_message(payload, model)

    def _translate(self, err: anthropic.APIError, model: str) -> LLMError:
        where = f"anthropic model {model!r} at {self.base_url}"
        if isinstance(err, anthropic.APIStatusError):
            status = err.status_code
            retried = status in _RETRIED_STATUSES or status >= 500
            after = f" after {self.max_retries} retries" if retried and self.max_retries else ""
            hint = " (check the API key)" if status in (401, 403) else ""
            detail = _redact(_error_detail(err.body), self._secrets())
            rid = f" [request-id {err.request_id}]" if err.request_id else ""
            return LLMError(f"{where} answered HTTP {status}{after}{hint}: {detail}{rid}")
        if isinstance(err, anthropic.APITimeoutError):
            return LLMError(f"{where} timed out after {self.timeout}s ({self._attempts})")
        if isinstance(err, anthropic.APIConnectionError):
            cause = _redact(str(err.__cause__ or err.message), self._secrets())
            return LLMError(f"{where} unreachable ({self._attempts}): {cause}")
        return LLMError(f"{where} failed: {_redact(err.message, self._secrets())}")

    def _secrets(self) -> list[str]:
        return [s for s in (self._client.api_key, self._client.auth_token) if s]


def parse_message(payload: bytes, model: str) -> ChatResponse:
    """Check a Messages API response body and turn it into a ``ChatResponse``."""
    try:
        body = output_json.loads(payload)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(
            f"anthropic response for model {model!r} is not JSON ({err}): {payload[:120]!r}"
        ) from err
    if not isinstance(body, dict):
        raise LLMResponseError(f"anthropic response for model {model!r} is not a JSON object")
    where = f"anthropic response for model {model!r}"
    content = body.get("content")
    if not isinstance(content, list):
        raise LLMResponseError(f"{where}: 'content' is {_kind(content)}, expected a list")
    blocks: list[ContentBlock] = []
    for index, block in enumerate(content):
        at = f"{where}: content[{index}]"
        if not isinstance(block, dict):
            raise LLMResponseError(f"{at} is {_kind(block)}, expected an object")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise LLMResponseError(f"{at} (text) has 'text' {_kind(text)}, expected a string")
            # The API rejects empty text blocks in requests, and this turn is sent back next time.
            if text:
                blocks.append(TextBlock(text=text))
        elif kind == "tool_use":
            blocks.append(_tool_use(block, at))
        # A non-string type (e.g. a list) is unhashable: test for str before the set lookup.
        elif not isinstance(kind, str) or kind not in _IGNORED_BLOCK_TYPES:
            raise LLMResponseError(f"{at} has unsupported block type {kind!r:.80}")
    stop_reason = body.get("stop_reason")
    if not blocks:
        raise LLMResponseError(f"{where} has no text or tool_use (stop_reason {stop_reason!r})")
    return ChatResponse(
        content=blocks,
        usage=_usage(body.get("usage"), where),
        stop_reason=stop_reason if isinstance(stop_reason, str) else None,
        model=body["model"] if isinstance(body.get("model"), str) else model,
    )


def _tool_use(block: dict[str, Any], at: str) -> ToolUseBlock:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise LLMResponseError(f"{at} (tool_use) has no id")
    if not isinstance(name, str) or not name:
        raise LLMResponseError(f"{at} (tool_use {call_id!r}) has no name")
    if not isinstance(args, dict):
        raise LLMResponseError(
            f"{at} (tool_use {call_id!r}, tool {name!r}) has input {_kind(args)}, "
            "expected an object"
        )
    try:
        output_json.check_tool_input_depth(args)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(f"{at} (tool_use {call_id!r}, tool {name!r}): {err}") from None
    return ToolUseBlock(id=call_id, name=name, input=args)


def _usage(usage: object, where: str) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    if not isinstance(usage, dict):
        raise LLMResponseError(f"{where}: 'usage' is {_kind(usage)}, expected an object")
    counts: dict[str, int] = {}
    for field in ("input_tokens", "output_tokens"):
        value = usage.get(field) or 0
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LLMResponseError(f"{where}: usage.{field} is {value!r}, expected a count")
        counts[field] = value
    return TokenUsage(**counts)


def _error_detail(body: object) -> str:
    """The provider's own explanation from an error body, on one line."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            kind, message = error.get("type"), error.get("message")
            text = f"{kind}: {message}" if kind and message else str(message or kind or error)
        else:
            text = str(error if error is not None else body)
    else:
        text = str(body) if body else "no error body"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _safe_cause(err: anthropic.APIError) -> BaseException | None:
    # A status error's own text embeds the response body, which can echo the key; chaining it
    # would print it in tracebacks. Our message already carries what it says.
    return None if isinstance(err, anthropic.APIStatusError) else err


def _kind(value: object) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"
