"""The model-facing conversation: messages of content blocks, as every adapter exchanges them.

The shapes are the reference's (Anthropic-like) JSON: a message is ``{role, content: [blocks]}``
and blocks are ``text``, ``tool_use``, ``tool_result`` or ``image``. Checkpoints store exactly this
JSON, so a conversation restored from a snapshot is what the model saw.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class TextBlock(_Block):
    """Text in a message: a prompt, or what the model said."""

    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(_Block):
    """A tool call the model asked for; its result names it by ``id``."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ImageBlock(_Block):
    """An image in a message; ``source`` is ``{"type": "base64", "media_type", "data"}`` or
    ``{"type": "url", "media_type", "url"}``."""

    type: Literal["image"] = "image"
    source: dict[str, Any]


class ToolResultBlock(_Block):
    """A tool call's result, sent to the model in a user message: text or a list of rich parts."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[dict[str, Any]]
    is_error: bool | None = None  # absent and false both mean success


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ImageBlock, Field(discriminator="type")
]


class LLMMessage(BaseModel):
    """One turn of a conversation, the user's or the model's, as a list of content blocks."""

    role: Literal["user", "assistant"]
    content: list[ContentBlock]

    def to_wire(self) -> dict[str, Any]:
        # Python mode: the blocks hold JSON data only, and pydantic's JSON mode fails on (or
        # replaces with U+FFFD) a lone surrogate in an object key of a model's tool input.
        return self.model_dump(mode="python", exclude_none=True)

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [block for block in self.content if isinstance(block, ToolUseBlock)]


class TokenUsage(BaseModel):
    """The tokens a model call consumed; usages add up with ``+``."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]


CALL_KEY_HEADER = "X-Oma-Call-Key"


class ChatRequest(BaseModel):
    """One model call as an adapter receives it: conversation, system prompt, tools and limits."""

    model: str
    messages: list[LLMMessage]
    system: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    # Names the call in its request (header ``CALL_KEY_HEADER``) when the run has a budget: the
    # run's id, the task's and the call's reservation, so a provider's or gateway's logs can be
    # matched with the run's spend. The same call sent again after a crash gets a new key.
    call_key: str | None = None


class ChatResponse(BaseModel):
    """One assistant turn: text and/or tool calls, with the usage it cost."""

    content: list[ContentBlock]
    usage: TokenUsage = Field(default_factory=TokenUsage)
    usage_reported: bool = True  # False: the server sent no usage (``usage`` is zeros)
    stop_reason: str | None = None
    model: str = ""

    @property
    def message(self) -> LLMMessage:
        return LLMMessage(role="assistant", content=list(self.content))
