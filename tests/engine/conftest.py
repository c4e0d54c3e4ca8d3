"""Fixtures the engine tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from oma import jsonutil
from oma.checkpoint.journal import JournalWriter
from oma.store import InMemoryStore, JournalStore
from tests.engine.server_stores import server_store


@pytest.fixture(params=["memory", "redis", "postgres"])
async def journal_store(request: pytest.FixtureRequest) -> AsyncIterator[JournalStore]:
    """Each store that keeps journals: in memory, and a fresh part of the session's Redis and
    PostgreSQL servers."""
    if request.param == "memory":
        yield InMemoryStore()
        return
    async with server_store(request, request.param, "jrn") as made:
        yield made


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every snapshot a journal writer was handed (saves and claims), as JSON text."""
    saved: list[str] = []
    save, claim = JournalWriter.save, JournalWriter.claim

    async def recording_save(self: JournalWriter, wire: Any, *args: Any) -> None:
        saved.append(jsonutil.dumps(wire))
        await save(self, wire, *args)

    async def recording_claim(self: JournalWriter, wire: Any, *args: Any) -> bool:
        saved.append(jsonutil.dumps(wire))
        return await claim(self, wire, *args)

    monkeypatch.setattr(JournalWriter, "save", recording_save)
    monkeypatch.setattr(JournalWriter, "claim", recording_claim)
    return saved
