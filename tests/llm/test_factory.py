"""make_adapter builds the adapter a run spec names."""

from __future__ import annotations

import pytest

from oma.llm import LLMAdapter
from oma.llm.anthropic_adapter import AnthropicAdapter
from oma.llm.factory import make_adapter
from oma.llm.openai_adapter import OpenAIAdapter


async def test_anthropic() -> None:
    adapter = make_adapter(
        "anthropic", "claude-x", base_url="http://127.0.0.1:9", timeout=5.0, max_retries=0
    )
    assert isinstance(adapter, AnthropicAdapter)
    assert isinstance(adapter, LLMAdapter)
    assert (adapter.name, adapter.model, adapter.timeout, adapter.max_retries) == (
        "anthropic",
        "claude-x",
        5.0,
        0,
    )
    assert adapter.base_url.startswith("http://127.0.0.1:9")
    await adapter.aclose()


async def test_openai() -> None:
    adapter = make_adapter("openai", "gpt-x", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert isinstance(adapter, OpenAIAdapter)
    assert (adapter.name, adapter.model, adapter.timeout, adapter.max_retries) == (
        "openai",
        "gpt-x",
        60.0,
        2,
    )
    assert adapter.base_url.startswith("http://127.0.0.1:9/v1")
    await adapter.aclose()


def test_scripted_must_be_passed_directly() -> None:
    with pytest.raises(ValueError, match="ScriptedAdapter"):
        make_adapter("scripted", "anything")


def test_unknown_provider() -> None:
    with pytest.raises(ValueError, match="unknown model provider 'gemini'"):
        make_adapter("gemini", "m")  # type: ignore[arg-type]
