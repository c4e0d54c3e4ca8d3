"""The baseline a store's write (and read) is measured against: the client library's own plain
write (read) of the same bytes, with none of oma's code in the path.

- memory: a dict assignment;
- file: write a temporary file, fsync it, rename it over the target, fsync the directory (the
  durability ``FileStore`` promises, done with ``os`` alone);
- redis: redis-py's ``SET``;
- postgres: psycopg's upsert of the text into a two-column table (key, value).

A write takes the text as ``str`` or as UTF-8 ``bytes`` (what ``orjson.dumps`` returns): each
client takes what it can send as it is (redis-py and a file take bytes; a ``text`` column takes
a ``str``, so psycopg's write decodes).

Reads are the same calls' counterparts: a dict lookup, reading the file, ``GET``, a ``SELECT``
of the value by key.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis.asyncio as redis_asyncio

Write = Callable[[str, str | bytes], Awaitable[None]]
Read = Callable[[str], Awaitable[str | None]]
TABLE = "plain_write"
CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (key text PRIMARY KEY, value text NOT NULL)"
SELECT = f"SELECT value FROM {TABLE} WHERE key = %s"
UPSERT = (
    f"INSERT INTO {TABLE} (key, value) VALUES (%s, %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


@dataclass
class PlainWriter:
    write: Write
    close: Callable[[], Awaitable[None]]
    read: Read


async def _nothing() -> None:
    return None


def memory_writer() -> PlainWriter:
    held: dict[str, str] = {}

    async def write(key: str, value: str | bytes) -> None:
        held[key] = value if isinstance(value, str) else value.decode()

    async def read(key: str) -> str | None:
        return held.get(key)

    return PlainWriter(write, _nothing, read)


def file_writer(directory: Path) -> PlainWriter:
    def target_of(key: str) -> Path:
        return directory / f"plain-{key.replace('/', '_')}.json"

    def write_sync(key: str, value: str | bytes) -> None:
        target = target_of(key)
        temporary = target.with_suffix(".tmp")
        with temporary.open("wb") as out:
            out.write(value.encode() if isinstance(value, str) else value)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def write(key: str, value: str | bytes) -> None:
        await asyncio.to_thread(write_sync, key, value)  # as FileStore does its file I/O

    async def read(key: str) -> str | None:
        target = target_of(key)
        return await asyncio.to_thread(target.read_text, "utf-8") if target.exists() else None

    return PlainWriter(write, _nothing, read)


async def redis_writer(url: str) -> PlainWriter:
    client = redis_asyncio.Redis.from_url(url)

    async def write(key: str, value: str | bytes) -> None:
        await client.set(key, value)

    async def read(key: str) -> str | None:
        raw = await client.get(key)
        return raw.decode() if raw is not None else None

    async def close() -> None:
        await client.aclose()

    return PlainWriter(write, close, read)


async def postgres_writer(dsn: str) -> PlainWriter:
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await connection.execute(CREATE)

    async def write(key: str, value: str | bytes) -> None:
        text = value if isinstance(value, str) else value.decode()
        await connection.execute(UPSERT, (key, text))

    async def read(key: str) -> str | None:
        row = await (await connection.execute(SELECT, (key,))).fetchone()
        return str(row[0]) if row is not None else None

    async def close() -> None:
        await connection.close()

    return PlainWriter(write, close, read)
