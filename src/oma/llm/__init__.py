"""Model adapters behind one interface: Anthropic, OpenAI (official SDKs) and scripted."""

from oma.llm.adapter import LLMAdapter, LLMError, LLMResponseError
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

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "ContentBlock",
    "ImageBlock",
    "LLMAdapter",
    "LLMError",
    "LLMMessage",
    "LLMResponseError",
    "TextBlock",
    "TokenUsage",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
]
