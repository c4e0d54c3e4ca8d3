"""OpenAI Chat Completions through the official SDK (``openai.AsyncOpenAI``).

Our conversation is Anthropic-shaped, so requests are translated (tool calls, tool results, images)
and responses are translated back. The SDK does not validate response bodies, so we read the raw
JSON and check it ourselves; SDK failures become one-line ``LLMError`` messages without the key.
"""

from __future__ import annotations

import json
import os
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from oma.llm import output_json
from oma.llm.adapter import LLMError, LLMResponseError
from oma.llm.types import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    ImageBlock,
    LLMMessage,
    TextBlock,
    TokenUsage,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

# Sent when a base_url is configured but no key exists: local compatible servers usually ignore
# authentication, but the SDK refuses to start without some key.
LOCAL_PLACEHOLDER_KEY = "oma-no-key"

# Statuses the SDK retries by itself; an error with one of them means the retries are used up.
_RETRIED_STATUSES = frozenset({408, 409, 429})


class OpenAIAdapter:
    """``LLMAdapter`` for OpenAI Chat Completions or any server speaking it (vLLM, llama.cpp...)."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self._owns_client = client is None
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if key is None and (base_url or os.environ.get("OPENAI_BASE_URL")):
                key = LOCAL_PLACEHOLDER_KEY
            if key is None:
                raise LLMError(
                    f"openai adapter for model {model!r} has no API key: pass api_key, set "
                    "OPENAI_API_KEY, or set base_url for a local server that needs none"
                )
            client = openai.AsyncOpenAI(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
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
        messages = cast(list[ChatCompletionMessageParam], to_openai_messages(request))
        tools = cast(list[ChatCompletionToolParam], [_function_tool(t) for t in request.tools])
        # Only an explicit limit is sent: every ChatRequest carries a default one, and servers
        # differ on the field; max_completion_tokens is the current name (max_tokens deprecated).
        explicit = "max_tokens" in request.model_fields_set
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                model=model,
                messages=messages,
                tools=tools or openai.omit,
                max_completion_tokens=request.max_tokens if explicit else openai.omit,
                temperature=openai.omit if request.temperature is None else request.temperature,
            )
            payload = raw.content
        except openai.APIError as err:
            raise self._translate(err, model) from _safe_cause(err)
        return parse_completion(payload, model)

    def _translate(self, err: openai.APIError, model: str) -> LLMError:
        where = f"openai model {model!r} at {self.base_url}"
        secrets = [self._client.api_key] if self._client.api_key else []
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            retried = status in _RETRIED_STATUSES or status >= 500
            after = f" after {self.max_retries} retries" if retried and self.max_retries else ""
            hint = " (check the API key)" if status in (401, 403) else ""
            detail = _redact(_error_detail(err.body), secrets)
            rid = f" [request-id {err.request_id}]" if err.request_id else ""
            return LLMError(f"{where} answered HTTP {status}{after}{hint}: {detail}{rid}")
        if isinstance(err, openai.APITimeoutError):
            return LLMError(f"{where} timed out after {self.timeout}s ({self._attempts})")
        if isinstance(err, openai.APIConnectionError):
            cause = _redact(str(err.__cause__ or err.message), secrets)
            return LLMError(f"{where} unreachable ({self._attempts}): {cause}")
        return LLMError(f"{where} failed: {_redact(err.message, secrets)}")


def _function_tool(tool: ToolSpec) -> dict[str, Any]:
    spec = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
    return {"type": "function", "function": spec}


def to_openai_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """Our Anthropic-shaped conversation as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for index, message in enumerate(request.messages):
        if message.role == "assistant":
            out.append(_assistant(message, index))
        else:
            out.extend(_user(message, index))
    return out


def _assistant(message: LLMMessage, index: int) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            function = {"name": block.name, "arguments": json.dumps(block.input)}
            calls.append({"id": block.id, "type": "function", "function": function})
        else:
            raise LLMError(f"messages[{index}]: an assistant message cannot carry {block.type}")
    # Content may be null only next to tool calls.
    content = "\n".join(texts) if texts or not calls else None
    wire: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        wire["tool_calls"] = calls
    return wire


def _user(message: LLMMessage, index: int) -> list[dict[str, Any]]:
    # Tool results become `tool` messages, which must directly follow the assistant message
    # that made the calls, so they go first; any text or images follow as one user message.
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            text = _flatten(block.content)
            if block.is_error:
                # The chat format has no error flag; the model still needs to know it failed.
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, index)}})
        else:
            raise LLMError(f"messages[{index}]: a user message cannot carry a tool_use block")
    if parts:
        # Plain text goes as a string: some compatible servers accept nothing else.
        if all(p["type"] == "text" for p in parts):
            results.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
        else:
            results.append({"role": "user", "content": parts})
    return results


def _flatten(content: str | list[dict[str, Any]]) -> str:
    """Tool messages carry text only: keep text parts, say what else was there."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif part.get("type") == "image":
            pieces.append("[image omitted: tool results are text-only in the OpenAI chat format]")
        else:
            pieces.append(json.dumps(part, ensure_ascii=False))
    return "\n".join(pieces)


def _image_url(block: ImageBlock, index: int) -> str:
    source = block.source
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return cast(str, source["url"])
    raise LLMError(f"messages[{index}]: unsupported image source type {source.get('type')!r}")


def parse_completion(payload: bytes, model: str) -> ChatResponse:
    """Check a Chat Completions response body and turn it into a ``ChatResponse``."""
    where = f"openai response for model {model!r}"
    try:
        body = output_json.loads(payload)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(f"{where} is not JSON ({err}): {payload[:120]!r}") from err
    if not isinstance(body, dict):
        raise LLMResponseError(f"{where} is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise LLMResponseError(f"{where} has no choices ({_kind(choices)})")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise LLMResponseError(f"{where}: choices[0].message is {_kind(message)}")
    blocks: list[ContentBlock] = []
    text = _message_text(message, where)
    if text:
        blocks.append(TextBlock(text=text))
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise LLMResponseError(f"{where}: tool_calls is {_kind(calls)}, expected a list")
    for index, call in enumerate(calls or []):
        blocks.append(_tool_call(call, f"{where}: tool_calls[{index}]"))
    finish = choice.get("finish_reason")
    if not blocks:
        raise LLMResponseError(f"{where} has no text and no tool calls (finish_reason {finish!r})")
    return ChatResponse(
        content=blocks,
        usage=_usage(body.get("usage"), where),
        stop_reason=finish if isinstance(finish, str) else None,
        model=body["model"] if isinstance(body.get("model"), str) else model,
    )


def _message_text(message: dict[str, Any], where: str) -> str:
    content = message.get("content")
    if content is None:
        # A refusal replaces the content; the agent should see why it got no answer.
        refusal = message.get("refusal")
        return refusal if isinstance(refusal, str) else ""
    if isinstance(content, str):
        return content
    # Some compatible servers answer with a list of text parts, as requests may.
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise LLMResponseError(f"{where}: message content is {_kind(content)}, expected text")


def _tool_call(call: object, at: str) -> ToolUseBlock:
    if not isinstance(call, dict):
        raise LLMResponseError(f"{at} is {_kind(call)}, expected an object")
    call_id, function = call.get("id"), call.get("function")
    if not isinstance(call_id, str) or not call_id:
        raise LLMResponseError(f"{at} has no id")
    if call.get("type", "function") != "function" or not isinstance(function, dict):
        raise LLMResponseError(f"{at} ({call_id!r}) is not a function call: {call.get('type')!r}")
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not name:
        raise LLMResponseError(f"{at} ({call_id!r}) has no function name")
    what = f"{at}: tool {name!r} call {call_id!r}"
    if isinstance(arguments, str):
        # Servers send "" for a tool without parameters; that means no arguments, not bad JSON.
        if not arguments.strip():
            arguments = "{}"
        try:
            arguments = output_json.loads(arguments)
        except output_json.OutputJSONError as err:
            raise LLMResponseError(
                f"{what} has arguments that are not valid JSON ({err}): {arguments[:120]!r}"
            ) from None
    elif arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise LLMResponseError(f"{what} has arguments {_kind(arguments)}, expected a JSON object")
    try:
        output_json.check_tool_input_depth(arguments)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(f"{what}: {err}") from None
    return ToolUseBlock(id=call_id, name=name, input=arguments)


def _usage(usage: object, where: str) -> TokenUsage:
    # Local servers often omit usage; zero is the honest count of what we know.
    if usage is None:
        return TokenUsage()
    if not isinstance(usage, dict):
        raise LLMResponseError(f"{where}: 'usage' is {_kind(usage)}, expected an object")
    for field in ("prompt_tokens", "completion_tokens"):
        value = usage.get(field) or 0
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LLMResponseError(f"{where}: usage.{field} is {value!r}, expected a count")
    return TokenUsage(
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
    )


def _error_detail(body: object) -> str:
    """The provider's own explanation from an error body, on one line."""
    # The SDK hands over the body's "error" object when there is one.
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict) and error.get("message"):
        kind = error.get("code") or error.get("type")
        text = f"{kind}: {error['message']}" if kind else str(error["message"])
    else:
        text = str(error) if error else "no error body"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _safe_cause(err: openai.APIError) -> BaseException | None:
    # A status error's own text embeds the response body, which can echo the key; chaining it
    # would print it in tracebacks. Our message already carries what it says.
    return None if isinstance(err, openai.APIStatusError) else err


def _kind(value: object) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"
