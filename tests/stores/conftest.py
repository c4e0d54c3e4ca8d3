"""Backends of the store conformance suite. Every backend joins ``BACKENDS``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from oma.store import CompareAndSetStore, FileStore, InMemoryStore

StoreFactory = Callable[[], Awaitable[CompareAndSetStore]]


def _memory(_: Path) -> StoreFactory:
    async def make() -> CompareAndSetStore:
        return InMemoryStore()

    return make


def _file(tmp_path: Path) -> StoreFactory:
    counter = iter(range(1_000_000))

    async def make() -> CompareAndSetStore:
        return FileStore(tmp_path / f"store-{next(counter)}" / "state.json")

    return make


BACKENDS: dict[str, Callable[[Path], StoreFactory]] = {"memory": _memory, "file": _file}


@pytest.fixture(params=sorted(BACKENDS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    factory: StoreFactory = BACKENDS[request.param](tmp_path)
    return factory


@pytest.fixture
async def store(store_factory: StoreFactory) -> CompareAndSetStore:
    return await store_factory()
