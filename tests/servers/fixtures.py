"""Session-wide real servers. Missing binaries skip, unless ``OMA_REQUIRE_SERVERS=1`` (CI)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers.postgres_server import PostgresServer, postgres_bin_dir
from tests.servers.redis_server import RedisServer, redis_binary


def missing(what: str) -> None:
    """Skip, or fail under OMA_REQUIRE_SERVERS=1 (CI), a test whose server binary is absent."""
    message = f"{what} is not installed (Debian package; hack/test installs it)"
    if os.environ.get("OMA_REQUIRE_SERVERS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        missing("redis-server")
    assert binary is not None
    with RedisServer(binary) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        missing("PostgreSQL (initdb, postgres)")
    assert bin_dir is not None
    with PostgresServer(bin_dir) as server:
        yield server
