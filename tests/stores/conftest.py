"""Backends of the store conformance suite (``oma.testing``, run by ``test_conformance.py``).
Every backend joins ``BACKENDS`` and ``DECLARED``.

A backend makes, for one test, a factory of stores that all work on one state, as two processes
would: one file, one Redis namespace, one Postgres schema (or one ``InMemoryStore``, which lives
in one process). Redis and Postgres are real servers started once per session
(``tests.servers``); each test gets its own namespace or schema, so tests never see each
other's keys.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from oma.store import (
    FileStore,
    InMemoryStore,
    MemoryStore,
    PostgresStore,
    PrefixedStore,
    RedactingStore,
    RedisStore,
    StoreCapabilities,
    tenant_prefix,
)
from oma.store.faults import FaultInjectingStore
from oma.testing import StoreFactory
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

Backend = Callable[[pytest.FixtureRequest, Path], StoreFactory]


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _memory(_: pytest.FixtureRequest, __: Path) -> StoreFactory:
    shared = InMemoryStore()  # its state is the object: every writer holds the same one

    async def make() -> MemoryStore:
        return shared

    return make


def _file(_: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    async def make() -> MemoryStore:
        return FileStore(tmp_path / "store" / "state.json")

    return make


def _redis(request: pytest.FixtureRequest, _: Path) -> StoreFactory:
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = unique_name("t")  # every store of one test shares it, as two processes would

    async def make() -> MemoryStore:
        return RedisStore(server.url, namespace=namespace)

    return make


def _postgres(request: pytest.FixtureRequest, _: Path) -> StoreFactory:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    schema = unique_name("t")

    async def make() -> MemoryStore:
        store = PostgresStore(server.dsn(), schema=schema)
        await store.open()
        return store

    return make


def _prefixed(request: pytest.FixtureRequest, path: Path) -> StoreFactory:
    """One tenant's part of a real Redis store, beside another tenant's and whole-store keys
    that it must never show, change or delete."""
    whole = _redis(request, path)

    async def make() -> MemoryStore:
        inner = await whole()
        await inner.set(f"{tenant_prefix('neighbour')}k", "theirs")
        await inner.set("top-level", "not a tenant's")
        return _ClosingPrefixed(inner, tenant_prefix("mine"))

    return make


class _ClosingPrefixed(PrefixedStore):
    """Checks, when the test ends, that the neighbours were left alone."""

    async def aclose(self) -> None:
        neighbour = await self.inner.get(f"{tenant_prefix('neighbour')}k")
        top = await self.inner.get("top-level")
        assert neighbour is not None and neighbour.value == "theirs"
        assert top is not None and top.value == "not a tenant's"
        await super().aclose()


def _redacting(_: pytest.FixtureRequest, __: Path) -> StoreFactory:
    inner = InMemoryStore()

    async def make() -> MemoryStore:
        return RedactingStore(inner)

    return make


def _faults(request: pytest.FixtureRequest, path: Path) -> StoreFactory:
    """The fault-injection wrapper with no fault planned, over a real Redis store: it must be
    the store it wraps, journals and all."""
    whole = _redis(request, path)

    async def make() -> MemoryStore:
        return FaultInjectingStore(await whole(), kill_at=None, log=None)

    return make


BACKENDS: dict[str, Backend] = {
    "memory": _memory,
    "file": _file,
    "redis": _redis,
    "postgres": _postgres,
    "redacting": _redacting,
    "prefixed": _prefixed,
    "faults": _faults,
}

_ALL = StoreCapabilities(compare_and_set=True, expiry=True, journal=True, value_size=True)
# What each backend must declare (the conformance suite checks each against its behaviour).
DECLARED: dict[str, StoreCapabilities] = {
    "memory": _ALL,
    "file": StoreCapabilities(compare_and_set=True, expiry=True),
    "redis": _ALL,
    "postgres": _ALL,
    "redacting": StoreCapabilities(expiry=True),  # over an InMemoryStore: its expiry only
    "prefixed": _ALL,  # over a RedisStore: all it has
    "faults": _ALL,  # over a RedisStore: all it has
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test (``BACKENDS``)."""
    name: str = request.param
    return name
