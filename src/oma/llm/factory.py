"""Build a model adapter from the run spec's model settings (provider, model, base_url...)."""

from __future__ import annotations

from typing import Literal

from oma.extras import needs_extra
from oma.llm.adapter import LLMAdapter

Provider = Literal["anthropic", "openai", "scripted"]

PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "scripted")


def make_adapter(
    provider: Provider,
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
) -> LLMAdapter:
    """The adapter for ``provider``; API keys default to the provider's usual env variable.

    ``scripted`` cannot be built from settings: its script is Python data, so a
    ``ScriptedAdapter`` is passed to the agent directly. Raises ``ValueError`` for it and for an
    unknown provider (a spec mistake, not a failed model call).
    """
    # Imported here so that naming one provider never imports the other provider's SDK.
    if provider == "anthropic":
        with needs_extra("provider anthropic"):
            from oma.llm.anthropic_adapter import AnthropicAdapter

        return AnthropicAdapter(
            model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
    if provider == "openai":
        with needs_extra("provider openai"):
            from oma.llm.openai_adapter import OpenAIAdapter

        return OpenAIAdapter(
            model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
    if provider == "scripted":
        raise ValueError(
            "provider 'scripted' has no settings to build it from: construct a "
            "oma.llm.scripted.ScriptedAdapter with its script and pass it as the agent's adapter"
        )
    raise ValueError(f"unknown model provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
