"""Anthropic Messages API through the official SDK (``anthropic.AsyncAnthropic``).

Our content blocks are already Anthropic-shaped, so a request goes out nearly verbatim. The work
here is on the way back: the SDK does not validate response bodies, so we read the raw JSON and
check it ourselves. What every SDK adapter shares (error messages without the key, the placeholder
key, usage) is in ``oma.llm.sdk_adapter``; this module keeps what is Anthropic's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, cast

import anthropic
from anthropic.types import MessageParam, ToolParam

from oma.llm.adapter import LLMError, LLMResponseError
from oma.llm.parts import part_text, sendable_parts
from oma.llm.sdk_adapter import (
    LOCAL_PLACEHOLDER_KEY,
    SDKAdapter,
    SDKErrors,
    call_headers,
    chat_response,
    configured_key,
    kind,
    load_object,
    tool_use,
)
from oma.llm.types import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    LLMMessage,
    TextBlock,
    ToolUseBlock,
)

# LOCAL_PLACEHOLDER_KEY is the base's, exported here too: callers import it with the adapter.
__all__ = ["LOCAL_PLACEHOLDER_KEY", "AnthropicAdapter", "parse_message"]

# Blocks we never request (extended thinking is off) and cannot represent; a compatible server
# may still emit them, and dropping them loses nothing the next request needs.
_IGNORED_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})


class AnthropicAdapter(SDKAdapter[anthropic.AsyncAnthropic]):
    """``LLMAdapter`` for the Anthropic Messages API or any server speaking it."""

    name = "anthropic"
    errors = SDKErrors(
        base=anthropic.APIError,
        status=anthropic.APIStatusError,
        timeout=anthropic.APITimeoutError,
        connection=anthropic.APIConnectionError,
    )

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
        self.max_tokens = max_tokens
        owns_client = client is None
        if client is None:
            client = _client(model, api_key, base_url, timeout, max_retries)
        super().__init__(model, client, owns_client=owns_client, timeout=timeout)

    async def _send(self, request: ChatRequest, model: str) -> bytes:
        # ChatRequest always carries a max_tokens; only an explicit one overrides the adapter's.
        max_tokens = (
            request.max_tokens if "max_tokens" in request.model_fields_set else self.max_tokens
        )
        messages = cast(list[MessageParam], [_message(m) for m in request.messages])
        tools = cast(list[ToolParam], [t.model_dump() for t in request.tools])
        # This SDK version has no `temperature` argument; the API still accepts the field.
        extra = {"temperature": request.temperature} if request.temperature is not None else None
        raw = await self._client.messages.with_raw_response.create(
            model=model,
            max_tokens=max_tokens,
            messages=messages,
            system=request.system if request.system else anthropic.omit,
            tools=tools if tools else anthropic.omit,
            extra_body=extra,
            extra_headers=call_headers(request),
        )
        return await raw.read()

    def _parse(self, payload: bytes, model: str) -> ChatResponse:
        return parse_message(payload, model)

    def _secrets(self) -> Iterable[str | None]:
        return (self._client.api_key, self._client.auth_token)

    @staticmethod
    def _explain(body: object) -> str:
        # The SDK hands over the whole body: {"type": "error", "error": {"type", "message"}}.
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                error_type, message = error.get("type"), error.get("message")
                if error_type and message:
                    return f"{error_type}: {message}"
                return str(message or error_type or error)
            return str(error if error is not None else body)
        return str(body) if body else "no error body"


def _client(
    model: str, api_key: str | None, base_url: str | None, timeout: float, max_retries: int
) -> anthropic.AsyncAnthropic:
    # An auth token in the environment is a credential the placeholder key would shadow.
    key = configured_key(
        api_key,
        base_url,
        env="ANTHROPIC_API_KEY",
        url_env="ANTHROPIC_BASE_URL",
        elsewhere=bool(os.environ.get("ANTHROPIC_AUTH_TOKEN")),
    )
    # With key None the SDK still looks for ANTHROPIC_AUTH_TOKEN and credential profiles.
    try:
        client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
    except anthropic.AnthropicError as err:  # e.g. a named profile that does not load
        raise LLMError(
            f"anthropic adapter for model {model!r}: credentials did not load: {err}",
            transient=False,
        ) from err
    if client.api_key is None and client.auth_token is None and client.credentials is None:
        raise LLMError(
            f"anthropic adapter for model {model!r} has no credentials: pass api_key, "
            "set ANTHROPIC_API_KEY, or set base_url for a local server that needs none",
            transient=False,
        )
    return client


def parse_message(payload: bytes, model: str) -> ChatResponse:
    """Check a Messages API response body and turn it into a ``ChatResponse``."""
    where = f"anthropic response for model {model!r}"
    body = load_object(payload, where)
    content = body.get("content")
    if not isinstance(content, list):
        raise LLMResponseError(f"{where}: 'content' is {kind(content)}, expected a list")
    blocks: list[ContentBlock] = []
    for index, block in enumerate(content):
        at = f"{where}: content[{index}]"
        if not isinstance(block, dict):
            raise LLMResponseError(f"{at} is {kind(block)}, expected an object")
        block_type = block.get("type")
        if block_type == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise LLMResponseError(f"{at} (text) has 'text' {kind(text)}, expected a string")
            # The API rejects empty text blocks in requests, and this turn is sent back next time.
            if text:
                blocks.append(TextBlock(text=text))
        elif block_type == "tool_use":
            blocks.append(_tool_use(block, at))
        # A non-string type (e.g. a list) is unhashable: test for str before the set lookup.
        elif not isinstance(block_type, str) or block_type not in _IGNORED_BLOCK_TYPES:
            raise LLMResponseError(f"{at} has unsupported block type {block_type!r:.80}")
    stop_reason = body.get("stop_reason")
    if not blocks:
        raise LLMResponseError(f"{where} has no text or tool_use (stop_reason {stop_reason!r})")
    usage = ("input_tokens", "output_tokens")
    return chat_response(body, blocks, stop_reason, model, usage=usage, where=where)


def _tool_use(block: dict[str, Any], at: str) -> ToolUseBlock:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise LLMResponseError(f"{at} (tool_use) has no id")
    if not isinstance(name, str) or not name:
        raise LLMResponseError(f"{at} (tool_use {call_id!r}) has no name")
    what = f"{at} (tool_use {call_id!r}, tool {name!r})"
    if not isinstance(args, dict):
        raise LLMResponseError(f"{what} has input {kind(args)}, expected an object")
    return tool_use(call_id, name, args, what)


def _message(message: LLMMessage) -> dict[str, Any]:
    """A message as the Messages API takes it: our blocks are its blocks, but for the parts of
    rich tool results (``oma.llm.parts``): each checked again, a file a ``document`` (PDF only),
    and a URL source only its URL."""
    wire = message.to_wire()
    blocks: list[dict[str, Any]] = []
    for block in wire["content"]:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            parts = [_part(part) for part in sendable_parts(block["content"])]
            block = {**block, "content": parts or ""}
        elif block.get("type") == "image":
            block = {**block, "source": _source(block.get("source") or {})}
        blocks.append(block)
    return {**wire, "content": blocks}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    """One checked part (``sendable_parts``) as the API takes it."""
    source = part.get("source") or {}
    if part["type"] == "image":
        return {"type": "image", "source": _source(source)}
    if part["type"] != "file":
        return part
    if source["media_type"] == "application/pdf":
        return {"type": "document", "source": _source(source), "title": part["filename"]}
    # The API reads documents as PDF only: the model learns the file was there.
    return {"type": "text", "text": f"{part_text(part)} (not shown: only PDF files are sent)"}


def _source(source: dict[str, Any]) -> dict[str, Any]:
    if source.get("type") == "url":
        return {"type": "url", "url": source.get("url")}
    return source
