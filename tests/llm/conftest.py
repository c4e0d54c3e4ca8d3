"""Fixtures for adapter tests: one loopback wire server per test module, a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.wire_server import WireServer

# Variables the SDKs read on their own; a developer's real settings must not leak into tests
# (a real key, a base URL pointing elsewhere, a proxy that would swallow loopback traffic).
_AMBIENT = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "ANTHROPIC_CUSTOM_HEADERS",
    "OPENAI_API_KEY",
    "OPENAI_ADMIN_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def wire_server() -> Iterator[WireServer]:
    server = WireServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(wire_server: WireServer) -> Iterator[WireServer]:
    """The module's server with no queued replies and no recorded requests."""
    wire_server.reset()
    yield wire_server
    wire_server.reset()
