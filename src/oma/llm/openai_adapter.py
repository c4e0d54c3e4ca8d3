"""OpenAI Chat Completions through the official SDK (``openai.AsyncOpenAI``).

Our conversation is Anthropic-shaped, so requests are translated (tool calls, tool results, images)
and responses are translated back. The SDK does not validate response bodies, so we read the raw
JSON and check it ourselves. What every SDK adapter shares (error messages without the key, the
placeholder key, usage) is in ``oma.llm.sdk_adapter``; this module keeps what is OpenAI's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from oma.llm import output_json
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
    ImageBlock,
    LLMMessage,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

# LOCAL_PLACEHOLDER_KEY is the base's, exported here too: callers import it with the adapter.
__all__ = ["LOCAL_PLACEHOLDER_KEY", "OpenAIAdapter", "parse_completion", "to_openai_messages"]


class OpenAIAdapter(SDKAdapter[openai.AsyncOpenAI]):
    """``LLMAdapter`` for OpenAI Chat Completions or any server speaking it (vLLM, llama.cpp...)."""

    name = "openai"
    errors = SDKErrors(
        base=openai.APIError,
        status=openai.APIStatusError,
        timeout=openai.APITimeoutError,
        connection=openai.APIConnectionError,
    )

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
        owns_client = client is None
        if client is None:
            key = configured_key(api_key, base_url, env="OPENAI_API_KEY", url_env="OPENAI_BASE_URL")
            if key is None:
                raise LLMError(
                    f"openai adapter for model {model!r} has no API key: pass api_key, set "
                    "OPENAI_API_KEY, or set base_url for a local server that needs none",
                    transient=False,
                )
            client = openai.AsyncOpenAI(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
            )
        super().__init__(model, client, owns_client=owns_client, timeout=timeout)

    async def _send(self, request: ChatRequest, model: str) -> bytes:
        messages = cast(list[ChatCompletionMessageParam], to_openai_messages(request))
        tools = cast(list[ChatCompletionToolParam], [_function_tool(t) for t in request.tools])
        # Only an explicit limit is sent: every ChatRequest carries a default one, and servers
        # differ on the field; max_completion_tokens is the current name (max_tokens deprecated).
        explicit = "max_tokens" in request.model_fields_set
        raw = await self._client.chat.completions.with_raw_response.create(
            model=model,
            messages=messages,
            tools=tools or openai.omit,
            max_completion_tokens=request.max_tokens if explicit else openai.omit,
            temperature=openai.omit if request.temperature is None else request.temperature,
            extra_headers=call_headers(request),
        )
        return raw.content

    def _parse(self, payload: bytes, model: str) -> ChatResponse:
        return parse_completion(payload, model)

    def _secrets(self) -> Iterable[str | None]:
        # The SDK also reads OPENAI_ADMIN_KEY into the client: a server may echo either.
        return (self._client.api_key, getattr(self._client, "admin_api_key", None))

    @staticmethod
    def _explain(body: object) -> str:
        # The SDK hands over the body's "error" object when there is one.
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict) and error.get("message"):
            code = error.get("code") or error.get("type")
            return f"{code}: {error['message']}" if code else str(error["message"])
        return str(error) if error else "no error body"


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
            raise _untranslatable(
                f"messages[{index}]: an assistant message cannot carry {block.type}"
            )
    # Content may be null only next to tool calls.
    content = "\n".join(texts) if texts or not calls else None
    wire: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        wire["tool_calls"] = calls
    return wire


def _user(message: LLMMessage, index: int) -> list[dict[str, Any]]:
    # Tool results become `tool` messages, which must directly follow the assistant message
    # that made the calls, so they go first; any text or images follow as one user message.
    # Tool messages carry text only: a tool result's images go in that user message too.
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            content = block.content
            sendable = content if isinstance(content, str) else sendable_parts(content)
            text = _flatten(sendable)
            if block.is_error:
                # The chat format has no error flag; the model still needs to know it failed.
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
            listed = [] if isinstance(sendable, str) else sendable
            images = [
                ImageBlock(source=part["source"]) for part in listed if part["type"] == "image"
            ]
            if images:
                said = f"The images of tool call {block.tool_use_id}:"
                parts.append({"type": "text", "text": said})
            for image in images:
                parts.append({"type": "image_url", "image_url": {"url": _image_url(image, index)}})
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, index)}})
        else:
            raise _untranslatable(
                f"messages[{index}]: a user message cannot carry a tool_use block"
            )
    if parts:
        # Plain text goes as a string: some compatible servers accept nothing else.
        if all(p["type"] == "text" for p in parts):
            results.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
        else:
            results.append({"role": "user", "content": parts})
    return results


def _flatten(content: str | list[dict[str, Any]]) -> str:
    """Tool messages carry text only: keep text parts, say what else was there (never the
    bytes of a part: a file's base64 as text would only cost tokens). ``content``: checked
    parts (``sendable_parts``)."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if part["type"] == "text":
            pieces.append(part["text"])
        elif part["type"] == "image":
            pieces.append(f"{part_text(part)} (in the next user message)")
        else:
            pieces.append(f"{part_text(part)} (not shown: tool results are text-only here)")
    return "\n".join(pieces)


def _image_url(block: ImageBlock, index: int) -> str:
    source = block.source
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return cast(str, source["url"])
    raise _untranslatable(
        f"messages[{index}]: unsupported image source type {source.get('type')!r}"
    )


def parse_completion(payload: bytes, model: str) -> ChatResponse:
    """Check a Chat Completions response body and turn it into a ``ChatResponse``."""
    where = f"openai response for model {model!r}"
    body = load_object(payload, where)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise LLMResponseError(f"{where} has no choices ({kind(choices)})")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise LLMResponseError(f"{where}: choices[0].message is {kind(message)}")
    blocks: list[ContentBlock] = []
    text = _message_text(message, where)
    if text:
        blocks.append(TextBlock(text=text))
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise LLMResponseError(f"{where}: tool_calls is {kind(calls)}, expected a list")
    for index, call in enumerate(calls or []):
        blocks.append(_tool_call(call, f"{where}: tool_calls[{index}]"))
    finish = choice.get("finish_reason")
    if not blocks:
        raise LLMResponseError(f"{where} has no text and no tool calls (finish_reason {finish!r})")
    usage = ("prompt_tokens", "completion_tokens")
    return chat_response(body, blocks, finish, model, usage=usage, where=where)


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
    raise LLMResponseError(f"{where}: message content is {kind(content)}, expected text")


def _tool_call(call: object, at: str) -> ToolUseBlock:
    if not isinstance(call, dict):
        raise LLMResponseError(f"{at} is {kind(call)}, expected an object")
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
        raise LLMResponseError(f"{what} has arguments {kind(arguments)}, expected a JSON object")
    return tool_use(call_id, name, arguments, what)


def _untranslatable(message: str) -> LLMError:
    """A conversation the chat format cannot carry: sending it again cannot help."""
    return LLMError(message, transient=False)
