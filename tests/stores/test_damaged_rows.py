"""Damaged data in a Redis or PostgreSQL store is a ``StoreCorruptError``, never a raw exception.

The store is a trust boundary: anything written into its layout by hand, by a buggy tool or by
a broken restore must end in the typed, permanent ``STORE_CORRUPT`` error naming the store, the
key and what is wrong, and saying what to do; never a ``JSONDecodeError`` / ``ValueError`` /
``UnicodeDecodeError`` (which the runner, catching only ``OmaError``, would crash-loop on), and
never a row silently left out. Other keys stay readable with ``get``, and deleting the damaged
key (the remedy the message names) makes the store whole again.

The damage is written straight into each store's layout (docs/stores.md "Data layout";
``redis_scripts``, ``postgres_sql``) against real servers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio as aioredis
from psycopg import sql
from typer.testing import CliRunner

from oma.errors import StoreCorruptError
from oma.store import PostgresStore, RedisStore
from oma.store.postgres_sql import JOURNAL_RECORDS_SUFFIX, JOURNAL_SUFFIX
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name

DEEP = 3000  # levels: past the JSON parsers' recursion limits, within PostgreSQL's json check


def _check(exc: StoreCorruptError, *words: str) -> None:
    """Typed, permanent, and a message that names the store, the key, the problem and what to
    do, on one line."""
    message = str(exc)
    assert exc.code == "STORE_CORRUPT" and exc.transient is False
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    for remedy in ("restore", "delete"):
        assert remedy in message.lower(), (remedy, message)


async def _the_good_journal_reads_whole(store: RedisStore | PostgresStore) -> None:
    """The fixtures' undamaged journal beside the damaged one still reads whole."""
    good = await store.journal_get("good")
    assert good is not None and good.records == ["base", "d1"] and good.metadata == {"m": 1}
    good_head = await store.journal_head("good")
    assert good_head is not None and good_head.records == 2


# ---------------------------------------------------------------------------------- Redis


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def redis_store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    async with RedisStore(redis_server.url, namespace=unique_name("dmg")) as store:
        await store.set("before", "fine", {"m": 1})
        await store.set_with_expiry("bad", "was fine", 3, {"m": 2})
        await store.set("after", "fine too")
        yield store


def _hash(store: RedisStore, field: str) -> str:
    return f"{{{store.namespace}}}:{field}"


# (what is damaged, how: hash field -> new raw content or None to remove, words the message has)
REDIS_ENTRY_DAMAGE: list[tuple[str, dict[str, bytes | None], tuple[str, ...]]] = [
    ("metadata not JSON", {"metadata": b"{not json"}, ("metadata", "not valid JSON")),
    ("metadata not an object", {"metadata": b"[1, 2]"}, ("metadata", "not a JSON object")),
    ("metadata too deep", {"metadata": b"[" * DEEP + b"]" * DEEP}, ("metadata",)),
    ("value not UTF-8", {"values": b"\xff\xfeoops"}, ("value", "UTF-8")),
    ("created not an integer", {"created": b"yesterday"}, ("creation time", "yesterday")),
    ("created out of range", {"created": b"9" * 30}, ("creation time", "out of range")),
    ("created missing", {"created": None}, ("no creation time",)),
    ("expiry not an integer", {"expiry": b"soon"}, ("expiry", "soon")),
    ("expiry a float", {"expiry": b"3.5"}, ("expiry", "3.5")),
]


@pytest.mark.parametrize(
    ("damage", "words"),
    [pytest.param(d, w, id=name) for name, d, w in REDIS_ENTRY_DAMAGE],
)
async def test_a_damaged_redis_entry_is_store_corrupt_on_get_and_list(
    redis_store: RedisStore,
    client: aioredis.Redis,
    damage: dict[str, bytes | None],
    words: tuple[str, ...],
) -> None:
    for field, raw in damage.items():
        if raw is None:
            await client.hdel(_hash(redis_store, field), "bad")
        else:
            await client.hset(_hash(redis_store, field), "bad", raw)
    with pytest.raises(StoreCorruptError) as got:
        await redis_store.get("bad")
    _check(got.value, "Redis", redis_store.namespace, "'bad'", *words)
    with pytest.raises(StoreCorruptError) as listed:
        await redis_store.list()  # never a listing that quietly leaves the key out
    _check(listed.value, "'bad'", *words)
    before, after = await redis_store.get("before"), await redis_store.get("after")
    assert before is not None and before.value == "fine" and before.metadata == {"m": 1}
    assert after is not None and after.value == "fine too"
    await redis_store.delete("bad")  # the remedy the message names
    assert [e.key for e in await redis_store.list()] == ["before", "after"]


async def test_a_redis_key_that_is_not_utf8_is_store_corrupt_in_list(
    redis_store: RedisStore, client: aioredis.Redis
) -> None:
    raw_key = b"k\xffey"
    for field, raw in (("values", b"v"), ("digests", b"0" * 64), ("created", b"1")):
        await client.hset(_hash(redis_store, field), raw_key, raw)
    await client.zadd(_hash(redis_store, "order"), {raw_key: 99})
    with pytest.raises(StoreCorruptError) as got:
        await redis_store.list()
    _check(got.value, "key", "UTF-8", "\\xff")
    assert (await redis_store.get("after")) is not None


@pytest.fixture
async def redis_journals(redis_store: RedisStore) -> RedisStore:
    for key in ("good", "bad"):
        await redis_store.journal_write(
            key, ["base", "d1"], version="v1", expected=None, replace=True, metadata={"m": 1}
        )
    return redis_store


REDIS_JOURNAL_DAMAGE: list[tuple[str, dict[str, bytes | None], tuple[str, ...], bool]] = [
    # (name, damage, words, whether journal_head sees it: it reads no records)
    ("count not an integer", {"jcount": b"many"}, ("record count", "many"), True),
    ("count missing", {"jcount": None}, ("record count",), True),
    ("count zero", {"jcount": b"0"}, ("record count",), True),
    ("count negative", {"jcount": b"-2"}, ("record count",), True),
    ("count past the records", {"jcount": b"3"}, ("record 2", "missing"), False),
    ("count absurd", {"jcount": b"9" * 12}, ("record count", "99999"), False),
    ("base past the records", {"jbase": b"2"}, ("record count, base and start", "2"), True),
    ("base not an integer", {"jbase": b"one"}, ("base", "one"), True),
    ("start past the base", {"jstart": b"1"}, ("start", "1"), True),
    ("start negative", {"jstart": b"-1", "jbase": b"1"}, ("start", "-1"), True),
    ("metadata not JSON", {"jmeta": b"{"}, ("metadata", "not valid JSON"), True),
    ("metadata not an object", {"jmeta": b'"text"'}, ("metadata", "not a JSON object"), True),
    ("created not an integer", {"jcreated": b"noon"}, ("creation time", "noon"), True),
    ("created missing", {"jcreated": None}, ("no creation time",), True),
    ("version not UTF-8", {"jversion": b"v\xff"}, ("version", "UTF-8"), True),
]


@pytest.mark.parametrize(
    ("damage", "words", "in_head"),
    [pytest.param(d, w, h, id=name) for name, d, w, h in REDIS_JOURNAL_DAMAGE],
)
async def test_a_damaged_redis_journal_is_store_corrupt(
    redis_journals: RedisStore,
    client: aioredis.Redis,
    damage: dict[str, bytes | None],
    words: tuple[str, ...],
    in_head: bool,
) -> None:
    store = redis_journals
    for field, raw in damage.items():
        if raw is None:
            await client.hdel(_hash(store, field), "bad")
        else:
            await client.hset(_hash(store, field), "bad", raw)
    with pytest.raises(StoreCorruptError) as got:
        await store.journal_get("bad")
    _check(got.value, "Redis", store.namespace, "journal", "'bad'", *words)
    if in_head:
        with pytest.raises(StoreCorruptError) as head:
            await store.journal_head("bad")
        _check(head.value, "journal", "'bad'", *words)
    await _the_good_journal_reads_whole(store)
    # The delete removes records up to the first missing one, whatever the count says (not a
    # number, absurd: it neither fails nor keeps the server busy).
    await store.delete("bad")
    assert await store.journal_get("bad") is None
    assert await client.hget(_hash(store, "jrecords"), "0:bad") is None
    assert await client.hget(_hash(store, "jrecords"), "1:bad") is None


async def test_a_redis_journal_record_that_is_not_utf8_is_store_corrupt(
    redis_journals: RedisStore, client: aioredis.Redis
) -> None:
    await client.hset(_hash(redis_journals, "jrecords"), "1:bad", b"\xc3(")
    with pytest.raises(StoreCorruptError) as got:
        await redis_journals.journal_get("bad")
    _check(got.value, "journal", "'bad'", "record 1", "UTF-8")


async def test_redis_journal_keys_and_versions_that_are_not_utf8_are_store_corrupt(
    redis_journals: RedisStore, client: aioredis.Redis
) -> None:
    await client.hset(_hash(redis_journals, "jversion"), "bad", b"\xff")
    with pytest.raises(StoreCorruptError) as version:
        await redis_journals.journal_version("bad")
    _check(version.value, "journal", "'bad'", "version", "UTF-8")
    assert await redis_journals.journal_version("good") == "v1"
    await client.hset(_hash(redis_journals, "jversion"), b"\xfe", b"v")
    with pytest.raises(StoreCorruptError) as keys:
        await redis_journals.journal_keys()
    _check(keys.value, "journal", "\\xfe", "UTF-8")


def test_the_cli_reports_a_damaged_redis_row_in_one_line(redis_server: RedisServer) -> None:
    """``oma checkpoint list`` and ``oma approvals list`` read ``list()``: one line, no
    traceback, an exit code that is not a crash."""
    namespace = unique_name("cli")
    sync = redis.Redis.from_url(redis_server.url)
    try:
        sync.hset(f"{{{namespace}}}:values", "bad", b"v")
        sync.hset(f"{{{namespace}}}:created", "bad", b"1")
        sync.hset(f"{{{namespace}}}:metadata", "bad", b"{oops")
        sync.zadd(f"{{{namespace}}}:order", {"bad": 1})
        from oma.cli import app

        url = f"{redis_server.url}?namespace={namespace}"
        for argv in (["checkpoint", "list"], ["approvals", "list"]):
            result = CliRunner().invoke(app, [*argv, "--store", url])
            assert result.exit_code not in (0, 1), result.output
            assert result.exception is None or isinstance(result.exception, SystemExit)
            lines = [line for line in result.output.splitlines() if line.strip()]
            assert len(lines) == 1 and "damaged" in lines[0] and "'bad'" in lines[0], result.output
            assert "Traceback" not in result.output
            assert redis_server.password not in result.output
    finally:
        sync.unlink(*sync.keys(f"{{{namespace}}}:*"))
        sync.close()


# ------------------------------------------------------------------------------- Postgres


@pytest.fixture
async def conn(postgres_server: PostgresServer) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(
        postgres_server.dsn(), autocommit=True
    ) as conn:
        yield conn


@pytest.fixture
async def pg_store(postgres_server: PostgresServer) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(postgres_server.dsn(), schema=unique_name("dmg")) as store:
        await store.set("before", "fine", {"m": 1})
        await store.set_with_expiry("bad", "was fine", 3, {"m": 2})
        await store.set("after", "fine too")
        for key in ("good", "bad"):
            await store.journal_write(
                key, ["base", "d1"], version="v1", expected=None, replace=True, metadata={"m": 1}
            )
        yield store


Damage = Callable[[psycopg.AsyncConnection[Any], PostgresStore], Awaitable[None]]


def _update(table_suffix: str, assignment: str, value: Any, where: str = "key = 'bad'") -> Damage:
    async def damage(conn: psycopg.AsyncConnection[Any], store: PostgresStore) -> None:
        assert store.schema is not None
        table = sql.Identifier(store.schema, store.table + table_suffix)
        statement = sql.SQL("UPDATE {} SET " + assignment + " WHERE " + where).format(table)
        await conn.execute(statement, (value,))

    return damage


def _deep_json() -> str:
    return json.dumps({"a": 1})[:-1] + ', "deep": ' + "[" * DEEP + "]" * DEEP + "}"


PG_ENTRY_DAMAGE: list[tuple[str, Damage, tuple[str, ...]]] = [
    ("value not UTF-8", _update("", "value = %s", b"\xff\xfeoops"), ("value", "UTF-8")),
    ("metadata an array", _update("", "metadata = %s::json", "[1, 2]"), ("not a JSON object",)),
    ("metadata a string", _update("", "metadata = %s::json", '"x"'), ("not a JSON object",)),
    ("metadata JSON null", _update("", "metadata = %s::json", "null"), ("not a JSON object",)),
    ("metadata too deep", _update("", "metadata = %s::json", _deep_json()), ("metadata",)),
]


@pytest.mark.parametrize(
    ("damage", "words"), [pytest.param(d, w, id=name) for name, d, w in PG_ENTRY_DAMAGE]
)
async def test_a_damaged_postgres_row_is_store_corrupt_on_get_and_list(
    pg_store: PostgresStore,
    conn: psycopg.AsyncConnection[Any],
    damage: Damage,
    words: tuple[str, ...],
) -> None:
    await damage(conn, pg_store)
    with pytest.raises(StoreCorruptError) as got:
        await pg_store.get("bad")
    _check(got.value, "PostgreSQL", pg_store.qualified_name, "'bad'", *words)
    with pytest.raises(StoreCorruptError) as listed:
        await pg_store.list()
    _check(listed.value, "'bad'", *words)
    before, after = await pg_store.get("before"), await pg_store.get("after")
    assert before is not None and before.value == "fine" and before.metadata == {"m": 1}
    assert after is not None and after.value == "fine too"
    await pg_store.delete("bad")  # the remedy the message names
    assert [e.key for e in await pg_store.list()] == ["before", "after"]


async def _drop_records(conn: psycopg.AsyncConnection[Any], store: PostgresStore) -> None:
    assert store.schema is not None
    table = sql.Identifier(store.schema, store.table + JOURNAL_RECORDS_SUFFIX)
    await conn.execute(sql.SQL("DELETE FROM {} WHERE key = 'bad'").format(table))


PG_JOURNAL_DAMAGE: list[tuple[str, Damage, tuple[str, ...], bool, bool]] = [
    # (name, damage, words, seen by journal_get, seen by journal_head)
    (
        "record not UTF-8",
        _update(JOURNAL_RECORDS_SUFFIX, "record = %s", b"\xc3(", "key = 'bad' AND seq = 1"),
        ("record 1", "UTF-8"),
        True,
        False,
    ),
    ("no records", _drop_records, ("no records",), True, False),
    (
        "metadata an array",
        _update(JOURNAL_SUFFIX, "metadata = %s::json", "[]"),
        ("metadata", "not a JSON object"),
        True,
        True,
    ),
    (
        "metadata too deep",
        _update(JOURNAL_SUFFIX, "metadata = %s::json", _deep_json()),
        ("metadata",),
        True,
        True,
    ),
    ("count zero", _update(JOURNAL_SUFFIX, "records = %s", 0), ("record count",), False, True),
    ("base past", _update(JOURNAL_SUFFIX, "base = %s", 2), ("record count", "2"), True, True),
    (
        "a record lost",
        _update(JOURNAL_RECORDS_SUFFIX, "seq = %s", 7, "key = 'bad' AND seq = 1"),
        ("record 1", "missing"),
        True,
        False,
    ),
    ("count negative", _update(JOURNAL_SUFFIX, "records = %s", -5), ("record count",), False, True),
    (
        "the last record lost",
        _update(JOURNAL_SUFFIX, "records = %s", 3),  # the head counts one more than there is
        ("record 2 of 3", "missing"),
        True,
        False,
    ),
]


@pytest.mark.parametrize(
    ("damage", "words", "in_get", "in_head"),
    [pytest.param(d, w, g, h, id=name) for name, d, w, g, h in PG_JOURNAL_DAMAGE],
)
async def test_a_damaged_postgres_journal_is_store_corrupt(
    pg_store: PostgresStore,
    conn: psycopg.AsyncConnection[Any],
    damage: Damage,
    words: tuple[str, ...],
    in_get: bool,
    in_head: bool,
) -> None:
    await damage(conn, pg_store)
    if in_get:
        with pytest.raises(StoreCorruptError) as got:
            await pg_store.journal_get("bad")
        _check(got.value, "PostgreSQL", pg_store.qualified_name, "journal", "'bad'", *words)
    if in_head:
        with pytest.raises(StoreCorruptError) as head:
            await pg_store.journal_head("bad")
        _check(head.value, "journal", "'bad'", *words)
    await _the_good_journal_reads_whole(pg_store)
    await pg_store.delete("bad")
    assert await pg_store.journal_get("bad") is None and await pg_store.journal_head("bad") is None


@pytest.mark.parametrize("count", [b"many", b"9" * 12, b"-3", b"1.5"])
async def test_the_read_script_reports_a_damaged_record_count_too(
    redis_journals: RedisStore, client: aioredis.Redis, count: bytes
) -> None:
    """The read script (what journal_get falls back to after raced reads) neither fails on a
    count that is not a whole number nor loops a billion times over an absurd one: it reads no
    records, which the reader reports as damage."""
    store = redis_journals
    await client.hset(_hash(store, "jcount"), "bad", count)
    rows = await store._journal_read(store._keys, [b"bad", b"b"])
    assert len(rows) == 4 and rows[3] is None  # version, metadata, created, no first: no records
    good = await store._journal_read(store._keys, [b"good", b"b"])
    assert [r for r in good[3:]] == [0, b"base", b"d1"]
