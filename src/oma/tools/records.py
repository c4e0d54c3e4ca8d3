"""Where the built-in side-effect tools write their records: a JSONL file, or a Redis list.

A file is enough when every attempt of a run shares one filesystem (``oma run``, the local test
cluster). Runner pods on a real cluster share none, so a Redis list (``OMA_LEDGER_URL``,
``OMA_TALLY_URL``) gives every attempt, and whoever checks the side effects from outside, one
place to read. Each record is one JSON object, the same in both forms.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from oma.extras import needs_extra

if TYPE_CHECKING:
    import redis.asyncio as aioredis

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

# Check and append in one step: a key is recorded and its record appended together or not at all.
_APPEND_ONCE = """
if redis.call('HSETNX', KEYS[2], ARGV[1], '1') == 1 then
  redis.call('RPUSH', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class RecordLocationError(ValueError):
    """A record location from the environment that cannot be used."""


@dataclass(frozen=True)
class RecordLocation:
    """A JSONL file (``path``) or a Redis list (``url`` + ``key``)."""

    path: Path | None = None
    url: str | None = None
    key: str = ""

    @classmethod
    def from_env(cls, name: str, default_path: str) -> RecordLocation:
        """``OMA_<NAME>_URL`` (+ ``OMA_<NAME>_KEY``) wins over ``OMA_<NAME>_PATH``."""
        url = os.environ.get(f"OMA_{name}_URL", "")
        if url:
            if not url.startswith(REDIS_SCHEMES):
                raise RecordLocationError(
                    f"OMA_{name}_URL must be a redis://, rediss:// or unix:// URL, got "
                    f"{url.split('://')[0]!r}: set it to a Redis URL, or unset it and use "
                    f"OMA_{name}_PATH for a file"
                )
            return cls(url=url, key=os.environ.get(f"OMA_{name}_KEY", f"oma:{name.lower()}"))
        return cls(path=Path(os.environ.get(f"OMA_{name}_PATH", default_path)))


async def append(location: RecordLocation, record: dict[str, Any]) -> None:
    """Add ``record``, whatever is there already."""
    line = orjson.dumps(record)
    if location.url:
        async with _client(location.url) as client:
            await client.rpush(location.key, line)
        return
    assert location.path is not None
    await asyncio.to_thread(_file_append, location.path, line, None)


async def append_once(location: RecordLocation, key: str, record: dict[str, Any]) -> bool:
    """Add ``record`` unless a record was added under ``key`` before; True when added."""
    line = orjson.dumps(record)
    if location.url:
        async with _client(location.url) as client:
            added = await client.eval(
                _APPEND_ONCE, 2, location.key, f"{location.key}:keys", key, line
            )
        return bool(added)
    assert location.path is not None
    return await asyncio.to_thread(_file_append, location.path, line, key)


async def read(location: RecordLocation) -> list[dict[str, Any]]:
    """Every record, oldest first (none when nothing was written yet)."""
    if location.url:
        async with _client(location.url) as client:
            lines = await client.lrange(location.key, 0, -1)
        return [orjson.loads(line) for line in lines]
    assert location.path is not None
    return await asyncio.to_thread(_file_read, location.path)


def _client(url: str) -> aioredis.Redis:
    with needs_extra("a ledger or tally in Redis (OMA_*_URL)"):
        import redis.asyncio as aioredis
    return aioredis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)


def _file_append(path: Path, line: bytes, key: str | None) -> bool:
    """Append ``line``; with ``key``, only if no record holds it. The lock makes check+append
    one step across processes on this machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as records:
        fcntl.flock(records, fcntl.LOCK_EX)
        if key is not None:
            records.seek(0)
            for existing in records:
                if existing.strip() and orjson.loads(existing).get("key") == key:
                    return False
        records.write(line + b"\n")
        records.flush()
        os.fsync(records.fileno())
        return True


def _file_read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
