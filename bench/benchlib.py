"""Shared helpers of the benchmarks: backends started as child processes, stats, store wrappers.

Import it from a benchmark script run as ``python bench/<name>.py`` (``bench/`` is then on
``sys.path``); importing it also puts the repository root and ``src/`` on ``sys.path``.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (str(ROOT / "src"), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from plain_writes import (  # noqa: E402
    PlainWriter,
    file_writer,
    memory_writer,
    postgres_writer,
    redis_writer,
)
from tests.servers.postgres_server import PostgresServer, postgres_bin_dir  # noqa: E402
from tests.servers.redis_server import RedisServer, redis_binary  # noqa: E402

from oma.store import FileStore, InMemoryStore, MemoryStore, PostgresStore, RedisStore  # noqa: E402
from oma.store.base import Metadata, supports_compare_and_set  # noqa: E402
from oma.store.reserved import CHECKPOINT_KEY_PREFIX  # noqa: E402

BACKENDS = ("memory", "file", "redis", "postgres")
StoreFactory = Callable[[], Awaitable[MemoryStore]]
PlainFactory = Callable[[], Awaitable[PlainWriter]]


def header(title: str, quick: bool) -> str:
    return (
        f"# {title} · {platform.node()} · {platform.processor() or platform.machine()}"
        f" · Python {platform.python_version()} · {'quick' if quick else 'full'} run"
    )


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def parse_backends(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in BACKENDS]
    if unknown:
        raise SystemExit(f"unknown backends {unknown}; choose from {', '.join(BACKENDS)}")
    return names


@asynccontextmanager
async def backends(workdir: Path, wanted: Sequence[str]) -> AsyncIterator[dict[str, StoreFactory]]:
    """A factory of fresh, empty stores per available backend among ``wanted``.

    Redis and PostgreSQL are started as child processes (the Debian packages the tests use) and
    stopped on exit; a backend whose server binary is missing is left out.
    """
    async with backend_pairs(workdir, wanted) as pairs:
        yield {name: stores for name, (stores, _) in pairs.items()}


@asynccontextmanager
async def backend_pairs(
    workdir: Path, wanted: Sequence[str]
) -> AsyncIterator[dict[str, tuple[StoreFactory, PlainFactory]]]:
    """As ``backends``, each with the client library's plain writer and reader of the same
    server (``plain_writes``: the baseline a store is measured against)."""
    redis_path = redis_binary() if "redis" in wanted else None
    pg_dir = postgres_bin_dir() if "postgres" in wanted else None
    redis_server = RedisServer(redis_path).start() if redis_path else None
    pg_server = PostgresServer(pg_dir).start() if pg_dir else None
    counter = iter(range(1_000_000))

    async def memory() -> MemoryStore:
        return InMemoryStore()

    async def file() -> MemoryStore:
        return FileStore(workdir / f"bench-{next(counter)}.json")

    async def redis() -> MemoryStore:
        assert redis_server is not None
        return RedisStore(redis_server.url, namespace=f"bench{next(counter)}")

    async def postgres() -> MemoryStore:
        assert pg_server is not None
        store = PostgresStore(pg_server.dsn(), schema=f"bench{next(counter)}")
        await store.open()
        return store

    async def plain_memory() -> PlainWriter:
        return memory_writer()

    async def plain_file() -> PlainWriter:
        return file_writer(workdir)

    async def plain_redis() -> PlainWriter:
        assert redis_server is not None
        return await redis_writer(redis_server.url)

    async def plain_postgres() -> PlainWriter:
        assert pg_server is not None
        return await postgres_writer(pg_server.dsn())

    available = {"memory": (memory, plain_memory), "file": (file, plain_file)}
    if redis_server is not None:
        available["redis"] = (redis, plain_redis)
    if pg_server is not None:
        available["postgres"] = (postgres, plain_postgres)
    try:
        yield {name: available[name] for name in wanted if name in available}
    finally:
        for server in (redis_server, pg_server):
            if server is not None:
                server.close()


class CountingStore:
    """Passes everything to ``inner``; counts checkpoint writes (durable boundaries) and bytes.

    A boundary is one write of a checkpoint snapshot (``set`` or ``compare_and_set`` of a
    ``.../latest`` key): a save, a tool commit, a suspension all are one.
    """

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.boundaries = 0
        self.written = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _count(self, key: str, value: str) -> None:
        if key.startswith(CHECKPOINT_KEY_PREFIX) and key.endswith("/latest"):
            self.boundaries += 1
            self.written += len(value)

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        self._count(key, value)
        await self.inner.set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        if not supports_compare_and_set(self.inner):
            raise TypeError(f"{type(self.inner).__name__} offers no compare_and_set")
        self._count(key, value)
        return await self.inner.compare_and_set(key, expected, value, metadata)
