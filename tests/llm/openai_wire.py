"""The Chat Completions path and reply bodies as OpenAI's API sends them, for the loopback
server to answer with (shared by the adapter tests)."""

from __future__ import annotations

from typing import Any

# The SDK appends `/chat/completions` to a base_url that already ends in `/v1`.
PATH = "/v1/chat/completions"


def completion(
    content: str | None = None,
    *calls: dict[str, Any],
    finish: str = "stop",
    usage: Any = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26},
    }


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
