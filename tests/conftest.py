"""Fixtures every suite may use: the real Redis and PostgreSQL servers (one per session)."""

from tests.servers.fixtures import postgres_server, redis_server

__all__ = ["postgres_server", "redis_server"]
