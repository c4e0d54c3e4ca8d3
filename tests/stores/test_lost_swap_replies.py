"""A compare_and_set whose connection is cut mid-write, on Redis and PostgreSQL: the store asks
the key whether the swap happened instead of re-sending it blindly (a re-sent swap that had won
would report False to its writer) or giving up (an outage of a second would fail the run)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from psycopg import sql

from oma.store import PostgresStore, RedisStore
from oma.store.base import CompareAndSetStore
from oma.store.remote import StoreUnavailableError
from tests.servers.cutting_proxy import CuttingProxy
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name

Store = RedisStore | PostgresStore
# (a store through the proxy, a store straight to the server), both on the same data
MakeStores = Callable[..., tuple[Store, Store]]


@pytest.fixture(params=["redis", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[CuttingProxy, MakeStores]]:
    made: list[Store] = []
    name = unique_name("lost")
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        proxy = CuttingProxy(redis.port)

        def make(retry_for: float = 5) -> tuple[Store, Store]:
            url = f"redis://:{redis.password}@127.0.0.1:{proxy.port}/0"
            pair = (
                RedisStore(url, namespace=name, retry_for=retry_for),
                RedisStore(redis.url, namespace=name),
            )
            made.extend(pair)
            return pair
    else:
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        proxy = CuttingProxy(postgres.port)

        def make(retry_for: float = 5) -> tuple[Store, Store]:
            dsn = postgres.dsn().replace(f":{postgres.port}/", f":{proxy.port}/")
            pair = (
                PostgresStore(dsn, schema=name, retry_for=retry_for),
                PostgresStore(postgres.dsn(), schema=name),
            )
            made.extend(pair)
            return pair

    await proxy.start()
    yield proxy, make
    for store in made:
        await store.aclose()
    await proxy.close()


async def _value(store: CompareAndSetStore) -> str | None:
    entry = await store.get("k")
    return None if entry is None else entry.value


async def test_a_swap_whose_reply_is_lost_reports_true(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make()
    await store.set("k", "v1")  # the store has worked: an outage is now ridden out
    proxy.cut_on(b"v2-lost-reply", before=False)
    assert await store.compare_and_set("k", "v1", "v2-lost-reply") is True
    assert proxy.cuts == 1
    assert await _value(direct) == "v2-lost-reply"


async def test_a_swap_that_never_arrived_is_sent_again(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make()
    await store.set("k", "v1")
    proxy.cut_on(b"v2-never-sent", before=True)
    assert await store.compare_and_set("k", "v1", "v2-never-sent") is True
    assert proxy.cuts == 1
    assert await _value(direct) == "v2-never-sent"


async def test_a_first_write_whose_reply_is_lost_reports_true(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make()
    await store.set("other", "x")
    proxy.cut_on(b"first-lost-reply", before=False)
    assert await store.compare_and_set("k", None, "first-lost-reply") is True
    assert proxy.cuts == 1
    assert await _value(direct) == "first-lost-reply"


async def test_a_swap_that_lost_reports_false_although_its_reply_is_lost(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make()
    await store.set("k", "v1")
    await direct.set("k", "theirs")  # another writer won meanwhile
    proxy.cut_on(b"v2-too-late", before=False)
    assert await store.compare_and_set("k", "v1", "v2-too-late") is False
    assert proxy.cuts == 1
    assert await _value(direct) == "theirs"


async def test_a_swap_that_never_arrived_is_not_sent_over_another_writers_value(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make()
    await store.set("k", "v1")
    await direct.set("k", "theirs")
    proxy.cut_on(b"v2-not-sent", before=True)
    assert await store.compare_and_set("k", "v1", "v2-not-sent") is False
    assert await _value(direct) == "theirs"


async def test_a_server_that_stays_silent_ends_in_a_typed_error(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, direct = make(retry_for=1)
    await store.set("k", "v1")
    proxy.drop_next = 1_000_000  # from now on nothing answers
    with pytest.raises(StoreUnavailableError):
        await store.compare_and_set("k", "v1", "v2")
    # What the swap did is not known to the writer: the store holds one of the two values.
    assert await _value(direct) in ("v1", "v2")


async def test_before_the_store_ever_worked_a_lost_reply_is_a_typed_error(
    stores: tuple[CuttingProxy, MakeStores],
) -> None:
    proxy, make = stores
    store, _ = make()
    proxy.drop_next = 1_000_000  # nothing ever answers: a wrong address looks like this
    with pytest.raises(StoreUnavailableError):
        await store.compare_and_set("k", None, "v")


async def test_a_postgres_swap_still_running_when_its_connection_went_is_not_reported_lost(
    postgres_server: PostgresServer,
) -> None:
    """The first statement waits on a row lock when the connection goes; the settle reads the
    expected value and sends the swap again, which waits behind the first. The first then
    applies: the second finds the row changed, and the swap is ours all the same."""
    proxy = CuttingProxy(postgres_server.port)
    await proxy.start()
    schema = unique_name("lock")
    dsn = postgres_server.dsn().replace(f":{postgres_server.port}/", f":{proxy.port}/")
    store = PostgresStore(dsn, schema=schema, retry_for=10)
    try:
        await store.set("k", "v1")
        async with await psycopg.AsyncConnection.connect(postgres_server.dsn()) as holder:
            locked = sql.SQL("SELECT 1 FROM {}.oma_store WHERE key = 'k' FOR UPDATE").format(
                sql.Identifier(schema)
            )
            await holder.execute(locked)  # a transaction holds the row
            proxy.cut_on(b"v2-waited", before=False, at_once=True)
            swap = asyncio.create_task(store.compare_and_set("k", "v1", "v2-waited"))
            await _until_waiting(postgres_server, 2)  # the first swap and the one sent again
            await holder.commit()  # the lock goes: the first swap applies, then the second
        assert await swap is True
        assert proxy.cuts == 1
        entry = await store.get("k")
        assert entry is not None and entry.value == "v2-waited"
    finally:
        await store.aclose()
        await proxy.close()


async def _until_waiting(server: PostgresServer, count: int) -> None:
    """Until ``count`` statements wait on a lock in the server."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    async with await psycopg.AsyncConnection.connect(server.dsn(), autocommit=True) as conn:
        for _ in range(200):
            row = await (await conn.execute(query)).fetchone()
            if row is not None and row[0] >= count:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} statements waiting on a lock")
