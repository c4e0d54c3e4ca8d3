"""How the conformance suite runs its tests: a store factory per test, one event loop per test.

Each test of the suite is an ``async`` body; a decorator here turns it into a plain (sync)
pytest test method that runs the body with ``asyncio.run``, so the suite needs no asyncio
plugin and no ``asyncio_mode`` in the project that runs it. The body gets a store (or the
factory) made by the subclass's ``make_store``; every store made is closed when the test ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeGuard, TypeVar

import pytest

from oma.store import (
    CompareAndSetStore,
    ExpiringStore,
    JournalStore,
    MemoryStore,
    StoreCapabilities,
    supports_compare_and_set,
    supports_expiry,
    supports_journal,
)
from oma.store.base import close_store

StoreFactory = Callable[[], Awaitable[MemoryStore]]
"""Makes a store: each call a new one, all of one test over the same backing state."""

_H = TypeVar("_H", bound="ConformanceHarness")
_S = TypeVar("_S")


class ConformanceHarness:
    """What a subclass provides: ``expected_capabilities`` and ``make_store``."""

    expected_capabilities: StoreCapabilities
    """What the store must declare (``capabilities_of(store)``), exactly."""

    async def make_store(self) -> MemoryStore:
        """A new store. The first store of a test starts empty; every store made during one test
        (the suite makes a second one to act as a second process) works on the same backing
        state as the first, as two processes opening the same database would."""
        raise NotImplementedError(f"{type(self).__name__} must define async make_store()")

    def run_with_stores(self, body: Callable[[StoreFactory], Awaitable[None]]) -> None:
        """Run ``body`` in a new event loop with a factory over ``make_store``; close every
        store it made (each once) when it ends."""
        __tracebackhide__ = True  # a failure shows the test's body, not this machinery
        asyncio.run(self._with_stores(body))

    async def _with_stores(self, body: Callable[[StoreFactory], Awaitable[None]]) -> None:
        __tracebackhide__ = True
        made: list[MemoryStore] = []

        async def make() -> MemoryStore:
            store = await self.make_store()
            made.append(store)
            return store

        try:
            await body(make)
        finally:
            closed: set[int] = set()
            for store in reversed(made):
                if id(store) not in closed:
                    closed.add(id(store))
                    await close_store(store)  # a wrapper closes what it wraps


def _conformance_test(
    body: Callable[[_H, _S], Awaitable[None]], prepare: Callable[[StoreFactory], Awaitable[_S]]
) -> Callable[[_H], None]:
    """A sync test method named like ``body`` that runs ``body(self, await prepare(factory))``."""

    def test(self: _H) -> None:
        async def run(make: StoreFactory) -> None:
            __tracebackhide__ = True
            await body(self, await prepare(make))

        self.run_with_stores(run)

    test.__name__ = body.__name__
    test.__qualname__ = body.__qualname__
    test.__doc__ = body.__doc__
    test.__module__ = body.__module__
    # Read in the body's module, where the TypeVar of ``self`` is not defined (API docs).
    test.__annotations__ = {"return": "None"}
    # No __wrapped__: pytest would read the body's parameters as fixtures. `place_as` makes
    # pytest report the body's file and line as the test's location.
    setattr(test, "place_as", body)  # noqa: B010
    return test


def _store_of(
    guard: Callable[[MemoryStore], TypeGuard[_S]], capability: str
) -> Callable[[StoreFactory], Awaitable[_S]]:
    async def prepare(make: StoreFactory) -> _S:
        store = await make()
        if not guard(store):
            pytest.skip(f"{type(store).__name__} does not declare {capability}")
        return store

    return prepare


async def _any_store(make: StoreFactory) -> MemoryStore:
    return await make()


async def _factory(make: StoreFactory) -> StoreFactory:
    return make


def with_store(body: Callable[[_H, MemoryStore], Awaitable[None]]) -> Callable[[_H], None]:
    """A test of every store."""
    return _conformance_test(body, _any_store)


def with_factory(body: Callable[[_H, StoreFactory], Awaitable[None]]) -> Callable[[_H], None]:
    """A test that makes its stores itself (more than one, over the same state)."""
    return _conformance_test(body, _factory)


def with_cas_store(
    body: Callable[[_H, CompareAndSetStore], Awaitable[None]],
) -> Callable[[_H], None]:
    """A test of ``compare_and_set``, skipped for a store that does not declare it."""
    return _conformance_test(body, _store_of(supports_compare_and_set, "compare_and_set"))


def with_expiring_store(
    body: Callable[[_H, ExpiringStore], Awaitable[None]],
) -> Callable[[_H], None]:
    """A test of ``set_with_expiry``, skipped for a store that does not declare expiry."""
    return _conformance_test(body, _store_of(supports_expiry, "expiry"))


def with_journal_store(
    body: Callable[[_H, JournalStore], Awaitable[None]],
) -> Callable[[_H], None]:
    """A test of journals, skipped for a store that does not declare them."""
    return _conformance_test(body, _store_of(supports_journal, "journal"))
