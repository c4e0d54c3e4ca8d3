"""Our Anthropic-shaped conversation as Chat Completions messages (pure mapping, no HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from oma.llm import ChatRequest, LLMError, LLMMessage
from oma.llm.openai_adapter import to_openai_messages


def mapped(*messages: dict[str, Any]) -> list[dict[str, Any]]:
    conversation = [LLMMessage.model_validate(m) for m in messages]
    return to_openai_messages(ChatRequest(model="m", messages=conversation))


def test_assistant_text_and_tool_calls_share_one_message() -> None:
    assert mapped(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "w", "input": {"city": "Ås"}},
            ],
        }
    ) == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city": "\\u00c5s"}'},
                }
            ],
        }
    ]


def test_tool_results_come_before_the_users_text() -> None:
    assert mapped(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "done"},
                {"type": "text", "text": "and then?"},
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "url",
                                "media_type": "image/png",
                                "url": "http://x/y.png",
                            },
                        }
                    ],
                },
            ],
        }
    ) == [
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "[image: image/png; URL reference] (in the next user message)",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and then?"},
                {"type": "text", "text": "The images of tool call c2:"},
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
            ],
        },
    ]


def test_url_images() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}
    assert mapped({"role": "user", "content": [image]}) == [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}],
        }
    ]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {
                "role": "user",
                "content": [{"type": "tool_use", "id": "c", "name": "w", "input": {}}],
            },
            r"messages\[0\]: a user message cannot carry a tool_use block",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_result", "tool_use_id": "c", "content": ""}],
            },
            r"messages\[0\]: an assistant message cannot carry tool_result",
        ),
        (
            {"role": "user", "content": [{"type": "image", "source": {"type": "file", "id": "f"}}]},
            "unsupported image source type 'file'",
        ),
    ],
)
def test_what_the_chat_format_cannot_carry(message: dict[str, Any], expected: str) -> None:
    with pytest.raises(LLMError, match=expected) as caught:
        mapped(message)
    assert caught.value.transient is False  # the same conversation fails the same way
