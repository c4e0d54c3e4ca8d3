"""Backends of the store conformance suite. Every backend joins ``BACKENDS``.

Redis and Postgres are real servers started once per session (``tests.servers``); each test
gets its own Redis namespace or Postgres schema, so tests never see each other's keys.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from oma.store import (
    CompareAndSetStore,
    FileStore,
    InMemoryStore,
    JournalStore,
    MemoryStore,
    PostgresStore,
    PrefixedStore,
    RedactingStore,
    RedisStore,
    StoreCapabilities,
    supports_compare_and_set,
    supports_journal,
    tenant_prefix,
)
from oma.store.base import close_store
from oma.store.faults import FaultInjectingStore
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

StoreFactory = Callable[[], Awaitable[MemoryStore]]
Backend = Callable[[pytest.FixtureRequest, Path], StoreFactory]


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _memory(_: pytest.FixtureRequest, __: Path) -> StoreFactory:
    async def make() -> MemoryStore:
        return InMemoryStore()

    return make


def _file(_: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    counter = iter(range(1_000_000))

    async def make() -> MemoryStore:
        return FileStore(tmp_path / f"store-{next(counter)}" / "state.json")

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
    async def make() -> MemoryStore:
        return RedactingStore(InMemoryStore())

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


@pytest.fixture
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> AsyncIterator[StoreFactory]:
    make = BACKENDS[backend](request, tmp_path)
    created: list[MemoryStore] = []

    async def tracked() -> MemoryStore:
        store = await make()
        created.append(store)
        return store

    yield tracked
    for store in created:
        await close_store(store)  # each wrapper closes what it wraps


@pytest.fixture
async def store(store_factory: StoreFactory) -> MemoryStore:
    return await store_factory()


@pytest.fixture
def cas_store(store: MemoryStore) -> CompareAndSetStore:
    """The backend's store, for tests of ``compare_and_set``; skipped for stores without it."""
    if not supports_compare_and_set(store):
        pytest.skip(f"{type(store).__name__} offers no compare_and_set (by design)")
    return store


@pytest.fixture
def journal_store(store: MemoryStore) -> JournalStore:
    """The backend's store, for tests of journals; skipped for stores without them."""
    if not supports_journal(store):
        pytest.skip(f"{type(store).__name__} keeps no journals (by design)")
    return store
