"""What each provider is sent for a rich tool result (oma.llm.parts): the real SDKs, a real
socket, the request body as the server reads it. Anthropic takes the parts nearly as they are (a
file becomes a ``document``, a URL source only its URL); OpenAI's tool messages are text only,
so the text and placeholders go there and the images follow in a user message. No part's bytes
end up as text."""

from __future__ import annotations

from typing import Any

from oma.llm import ChatRequest, LLMMessage
from oma.llm.anthropic_adapter import AnthropicAdapter
from oma.llm.openai_adapter import OpenAIAdapter
from oma.llm.types import ToolResultBlock, ToolUseBlock
from tests.llm import anthropic_wire, openai_wire
from tests.llm.wire_server import Reply, WireServer

PNG = "iVBORw0KGgo="
PDF = "JVBERi0xLjQ="
PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "Q3 revenue"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {
        "type": "image",
        "source": {"type": "url", "media_type": "image/png", "url": "https://x/c.png"},
    },
    {
        "type": "file",
        "filename": "q3.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
    },
    {
        "type": "file",
        "filename": "notes.pdf",
        "source": {"type": "url", "media_type": "application/pdf", "url": "https://x/n.pdf"},
    },
    {
        "type": "file",
        "filename": "data.csv",
        "source": {"type": "base64", "media_type": "text/csv", "data": "YSxi"},
    },
]


def _request(model: str) -> ChatRequest:
    call = LLMMessage(
        role="assistant", content=[ToolUseBlock(id="c1", name="chart", input={"q": 3})]
    )
    result = LLMMessage(
        role="user", content=[ToolResultBlock(tool_use_id="c1", content=PARTS, is_error=False)]
    )
    return ChatRequest(model=model, messages=[call, result])


async def test_anthropic_is_sent_documents_and_url_sources(server: WireServer) -> None:
    server.expect(
        anthropic_wire.PATH, Reply(200, anthropic_wire.message(anthropic_wire.text("ok")))
    )
    adapter = AnthropicAdapter("claude-test-1", api_key="k", base_url=server.base_url)
    try:
        await adapter.chat(_request("claude-test-1"))
    finally:
        await adapter.aclose()
    (sent,) = server.received
    assert isinstance(sent.body, dict)
    (block,) = sent.body["messages"][1]["content"]
    assert block["type"] == "tool_result" and block["is_error"] is False
    assert block["content"] == [
        {"type": "text", "text": "Q3 revenue"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://x/c.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "q3.pdf",
        },
        {
            "type": "document",
            "source": {"type": "url", "url": "https://x/n.pdf"},
            "title": "notes.pdf",
        },
        {
            "type": "text",
            "text": "[file: data.csv; text/csv; inline data] (not shown: only PDF files are sent)",
        },
    ]


async def test_openai_gets_text_in_the_tool_message_and_the_images_after_it(
    server: WireServer,
) -> None:
    server.expect(openai_wire.PATH, Reply(200, openai_wire.completion("ok")))
    adapter = OpenAIAdapter("gpt-test-1", api_key="k", base_url=server.base_url + "/v1")
    try:
        await adapter.chat(_request("gpt-test-1"))
    finally:
        await adapter.aclose()
    (sent,) = server.received
    assert isinstance(sent.body, dict)
    tool, user = sent.body["messages"][1:]
    assert tool == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "\n".join(
            [
                "Q3 revenue",
                "[image: image/png; inline data] (in the next user message)",
                "[image: image/png; URL reference] (in the next user message)",
                "[file: q3.pdf; application/pdf; inline data] (not shown: tool results are "
                "text-only here)",
                "[file: notes.pdf; application/pdf; URL reference] (not shown: tool results are "
                "text-only here)",
                "[file: data.csv; text/csv; inline data] (not shown: tool results are text-only "
                "here)",
            ]
        ),
    }
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The images of tool call c1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://x/c.png"}},
        ],
    }
    assert PDF not in str(sent.body)  # a file's bytes are never sent as text


# Parts as a hostile or older checkpoint may hold them: never checked by this process.
RESTORED: list[dict[str, Any]] = [
    {"type": "image", "source": "not an object"},
    {"type": "file", "source": ["x"]},
    {"type": "image"},
    {"type": "text", "text": ""},
    {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/svg+xml", "data": "PHN2Zz4="},
    },
    {
        "type": "file",
        "filename": "t.csv",
        "source": {"type": "url", "media_type": "text/csv", "url": "https://x/t.csv"},
    },
    {
        "type": "image",
        "source": {"type": "url", "media_type": "image/png", "url": " https://x/a.png"},
    },
]
LEFT_OUT = "[a part that is not a valid text, image or file part was left out]"
SVG = "[image: image/svg+xml; inline data] (not shown: images are sent as JPEG, PNG, GIF or WebP)"


def _restored_request(model: str) -> ChatRequest:
    call = LLMMessage(role="assistant", content=[ToolUseBlock(id="c1", name="chart", input={})])
    result = LLMMessage(
        role="user", content=[ToolResultBlock(tool_use_id="c1", content=RESTORED, is_error=False)]
    )
    return ChatRequest(model=model, messages=[call, result])


async def test_restored_parts_that_fail_the_check_are_left_out_for_anthropic(
    server: WireServer,
) -> None:
    server.expect(
        anthropic_wire.PATH, Reply(200, anthropic_wire.message(anthropic_wire.text("ok")))
    )
    adapter = AnthropicAdapter("claude-test-1", api_key="k", base_url=server.base_url)
    try:
        await adapter.chat(_restored_request("claude-test-1"))
    finally:
        await adapter.aclose()
    (block,) = server.received[0].body["messages"][1]["content"]
    assert block["content"] == [
        {"type": "text", "text": LEFT_OUT},
        {"type": "text", "text": LEFT_OUT},
        {"type": "text", "text": LEFT_OUT},
        {"type": "text", "text": SVG},
        {
            "type": "text",
            "text": "[file: t.csv; text/csv; URL reference] (not shown: only PDF files are sent)",
        },
        {"type": "text", "text": LEFT_OUT},
    ]


async def test_restored_parts_that_fail_the_check_are_left_out_for_openai(
    server: WireServer,
) -> None:
    server.expect(openai_wire.PATH, Reply(200, openai_wire.completion("ok")))
    adapter = OpenAIAdapter("gpt-test-1", api_key="k", base_url=server.base_url + "/v1")
    try:
        await adapter.chat(_restored_request("gpt-test-1"))
    finally:
        await adapter.aclose()
    messages = server.received[0].body["messages"]
    tool = messages[1]
    assert tool["content"].count(LEFT_OUT) == 4 and SVG in tool["content"]
    assert len(messages) == 2  # no image was fit to send: no user message after the tool's
