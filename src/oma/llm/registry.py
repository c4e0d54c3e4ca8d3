"""Build an adapter from a model spec; SDKs are imported only when their provider is used."""

from __future__ import annotations

import importlib
import os

from oma.llm.adapter import LLMAdapter, LLMError
from oma.llm.scripted import ScriptedAdapter

_DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_ADAPTERS = {
    "anthropic": ("oma.llm.anthropic_adapter", "AnthropicAdapter"),
    "openai": ("oma.llm.openai_adapter", "OpenAIAdapter"),
}


def adapter_for(
    provider: str,
    *,
    model: str = "",
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
    script: object = None,
) -> LLMAdapter:
    if provider == "scripted":
        if not isinstance(script, list | dict):
            raise LLMError("the scripted provider needs a script (a list or dict of turns)")
        return ScriptedAdapter(script)
    if provider not in _ADAPTERS:
        raise LLMError(f"unknown model provider {provider!r} (anthropic, openai or scripted)")
    env_name = api_key_env or _DEFAULT_KEY_ENV[provider]
    api_key = os.environ.get(env_name)
    module_name, class_name = _ADAPTERS[provider]
    adapter_class = getattr(importlib.import_module(module_name), class_name)
    adapter: LLMAdapter = adapter_class(
        model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
    )
    return adapter
