"""A store on a real server for engine tests that run on every journal backend: a fresh Redis
namespace or PostgreSQL schema, cleared and closed after the test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from oma.store.postgres import PostgresStore
from oma.store.redis import RedisStore
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name


@contextlib.asynccontextmanager
async def server_store(
    request: pytest.FixtureRequest, kind: str, prefix: str
) -> AsyncIterator[RedisStore | PostgresStore]:
    """``kind`` redis or postgres, on the session's server (its fixture)."""
    made: RedisStore | PostgresStore
    if kind == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        made = RedisStore(redis.url, namespace=unique_name(prefix))
    else:
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        made = PostgresStore(postgres.dsn(), schema=unique_name(prefix))
    try:
        yield made
    finally:
        await made.clear()
        await made.aclose()
