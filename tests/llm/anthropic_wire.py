"""The Messages API's path and reply bodies as Anthropic's API sends them, for the loopback
server to answer with (shared by the adapter tests)."""

from __future__ import annotations

from typing import Any

PATH = "/v1/messages"


def message(
    *content: dict[str, Any], stop: str = "end_turn", usage: Any = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": list(content),
        "stop_reason": stop,
        "usage": usage if usage is not None else {"input_tokens": 11, "output_tokens": 7},
        **extra,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}
