"""PostgresStore specifics: migrations, data layout, pools, odd strings, errors."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from oma.errors import StoreError
from oma.store import PostgresStore, StoreAuthError, StoreUnavailableError, postgres_migrations
from oma.store.postgres_migrations import migrate
from oma.store.postgres_sql import (
    CREATE_MIGRATIONS_TABLE,
    JOURNAL_RECORDS_SUFFIX,
    JOURNAL_SUFFIX,
    MIGRATIONS,
    RECORD_MIGRATION,
)
from tests.servers.postgres_server import PostgresServer
from tests.servers.process import free_port
from tests.stores.conftest import unique_name

LATEST = [migration.version for migration in MIGRATIONS]
BUT_4 = [version for version in LATEST if version != 4]  # what a table that skipped 4 records


@pytest.fixture
async def conn(postgres_server: PostgresServer) -> AsyncIterator[psycopg.AsyncConnection]:
    async with await psycopg.AsyncConnection.connect(
        postgres_server.dsn(), autocommit=True
    ) as conn:
        yield conn


async def _applied(conn: psycopg.AsyncConnection, schema: str, table: str) -> list[int]:
    cursor = await conn.execute(
        sql.SQL("SELECT version FROM {} WHERE store_table = %s ORDER BY version").format(
            sql.Identifier(schema, "oma_store_migrations")
        ),
        (f"{schema}.{table}",),
    )
    return [row[0] for row in await cursor.fetchall()]


async def test_first_open_migrates_and_later_opens_do_nothing(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema = unique_name("mig")
    async with PostgresStore(postgres_server.dsn(), schema=schema, table="kv") as store:
        await store.set("k", "v")
    assert await _applied(conn, schema, "kv") == LATEST
    assert await migrate(conn, sql.Identifier(schema, "kv"), schema, "kv") == []
    async with PostgresStore(postgres_server.dsn(), schema=schema, table="kv") as again:
        entry = await again.get("k")
        assert entry is not None and entry.value == "v"


async def test_concurrent_first_opens_migrate_exactly_once(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema, table = unique_name("mig"), "racing"
    connections = [
        await psycopg.AsyncConnection.connect(postgres_server.dsn(), autocommit=True)
        for _ in range(8)
    ]
    try:
        applied = await asyncio.gather(
            *(migrate(c, sql.Identifier(schema, table), schema, table) for c in connections)
        )
    finally:
        for c in connections:
            await c.close()
    assert sorted(applied, key=len) == [[]] * 7 + [LATEST]
    assert await _applied(conn, schema, table) == LATEST


async def test_unknown_newer_schema_version_is_refused(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema = unique_name("mig")
    async with PostgresStore(postgres_server.dsn(), schema=schema):
        pass
    await conn.execute(
        sql.SQL("INSERT INTO {} VALUES (%s, 999, 'from the future')").format(
            sql.Identifier(schema, "oma_store_migrations")
        ),
        (f"{schema}.oma_store",),
    )
    store = PostgresStore(postgres_server.dsn(), schema=schema)
    with pytest.raises(StoreError, match=r"999.*upgrade oma"):
        await store.get("k")
    await store.aclose()


async def _columns(conn: psycopg.AsyncConnection, schema: str, table: str) -> list[str]:
    cursor = await conn.execute(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    return [row[0] for row in await cursor.fetchall()]


async def test_layout_position_and_created_at(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema = unique_name("layout")
    async with PostgresStore(postgres_server.dsn(), schema=schema) as store:
        await store.set("b", "beta")
        await store.set_with_expiry("a", "alpha", 3, {"m": "x"})
        await store.set("b", "beta2")
        cursor = await conn.execute(
            sql.SQL(
                "SELECT key, value, metadata::text, expires_at_turn,"
                " created_at < updated_at FROM {} ORDER BY position"
            ).format(sql.Identifier(schema, "oma_store"))
        )
        rows = await cursor.fetchall()
    assert rows == [("b", b"beta2", None, None, True), ("a", b"alpha", '{"m":"x"}', 3, False)]
    assert await _columns(conn, schema, "oma_store") == [
        "key", "position", "value", "metadata", "expires_at_turn", "created_at", "updated_at"
    ]  # fmt: skip


async def _table_before_migration_4(
    conn: psycopg.AsyncConnection, schema: str, table: str, upto: int = 3
) -> sql.Identifier:
    """A store table as an oma before migration 4 left it (migrations 1 to ``upto``); with
    ``upto`` 3 the required later migrations are applied too, so only the optional 4 waits."""
    target = sql.Identifier(schema, table)
    migrations = sql.Identifier(schema, "oma_store_migrations")
    async with conn.transaction():
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        await conn.execute(CREATE_MIGRATIONS_TABLE.format(migrations=migrations))
        later = [m for m in MIGRATIONS if m.version > 4] if upto == 3 else []
        for migration in [*MIGRATIONS[:upto], *later]:
            for statement in migration.statements:
                await conn.execute(
                    statement.format(
                        table=target,
                        position_index=sql.Identifier(f"{table}_position_idx"),
                        journal=sql.Identifier(schema, table + JOURNAL_SUFFIX),
                        journal_records=sql.Identifier(schema, table + JOURNAL_RECORDS_SUFFIX),
                    )
                )
            await conn.execute(
                RECORD_MIGRATION.format(migrations=migrations),
                (f"{schema}.{table}", migration.version, migration.description),
            )
    return target


async def _least_privileged(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection, schema: str, table: str
) -> str:
    """A role that may use the table (and its journals), not create or alter; its DSN."""
    role = unique_name("app")
    grants = [
        "CREATE ROLE {role} LOGIN PASSWORD 'app-pw'",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON {schema}.oma_store_migrations TO {role}",
    ] + [
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.{name} TO {{role}}"
        for name in (table, table + JOURNAL_SUFFIX, table + JOURNAL_RECORDS_SUFFIX)
    ]
    for grant in grants:
        with contextlib.suppress(psycopg.errors.UndefinedTable):  # journals: from migration 3
            await conn.execute(
                sql.SQL(grant).format(role=sql.Identifier(role), schema=sql.Identifier(schema))
            )
    return postgres_server.dsn(password="app-pw").replace("//oma:", f"//{role}:")


async def test_a_role_that_may_not_alter_the_table_skips_migration_4_and_works(
    postgres_server: PostgresServer,
    conn: psycopg.AsyncConnection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Migration 4 is optional: the table works with the column there (the swap compares
    values either way). A role that does not own the table uses it, with a warning that
    names the migration and what it needs; the owner's next open applies it."""
    schema, table = unique_name("mig4role"), "kv"
    await _table_before_migration_4(conn, schema, table)
    app_dsn = await _least_privileged(postgres_server, conn, schema, table)
    with caplog.at_level(logging.WARNING, logger="oma.store.postgres_migrations"):
        async with PostgresStore(app_dsn, schema=schema, table=table) as app:
            await app.set("k", "v1")
            assert not await app.compare_and_set("k", "v2", "lost")
            assert await app.compare_and_set("k", "v1", "v3")
            entry = await app.get("k")
            assert entry is not None and entry.value == "v3"
    assert await _applied(conn, schema, table) == BUT_4
    assert "value_sha256" in await _columns(conn, schema, table)
    warned = [r.getMessage() for r in caplog.records]
    assert any("optional schema migration 4" in w and "owns the table" in w for w in warned)
    async with PostgresStore(postgres_server.dsn(), schema=schema, table=table) as owner:
        entry = await owner.get("k")
        assert entry is not None and entry.value == "v3"
    assert await _applied(conn, schema, table) == LATEST
    assert "value_sha256" not in await _columns(conn, schema, table)


async def test_migration_4_waits_for_the_table_briefly_then_leaves_it_for_later(
    postgres_server: PostgresServer,
    conn: psycopg.AsyncConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long transaction that read the table (an idle psql session, a backup) holds a lock
    the migration must wait for; every statement on the table would queue behind the waiting
    migration. It waits at most LOCK_TIMEOUT_MS, then the store opens without it."""
    monkeypatch.setattr(postgres_migrations, "LOCK_TIMEOUT_MS", 200)
    schema, table = unique_name("mig4lock"), "kv"
    target = await _table_before_migration_4(conn, schema, table)
    async with await psycopg.AsyncConnection.connect(postgres_server.dsn()) as reader:
        await reader.execute(sql.SQL("SELECT count(*) FROM {}").format(target))  # stays open
        async with PostgresStore(postgres_server.dsn(), schema=schema, table=table) as store:
            await store.set("k", "v")
            assert await store.compare_and_set("k", "v", "w")
        assert await _applied(conn, schema, table) == BUT_4
        await reader.rollback()
    async with PostgresStore(postgres_server.dsn(), schema=schema, table=table) as store:
        entry = await store.get("k")
        assert entry is not None and entry.value == "w"
    assert await _applied(conn, schema, table) == LATEST


async def test_a_required_migration_the_role_may_not_run_says_what_it_needs(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema, table = unique_name("mig3role"), "kv"
    await _table_before_migration_4(conn, schema, table, upto=2)
    app_dsn = await _least_privileged(postgres_server, conn, schema, table)
    store = PostgresStore(app_dsn, schema=schema, table=table)
    with pytest.raises(StoreError) as refused:
        await store.open()
    await store.aclose()
    message = str(refused.value)
    assert "needs schema migration 3 (create the journal tables)" in message, message
    assert "permission denied" in message and "owns the table" in message, message
    assert not refused.value.transient


async def test_a_reader_uses_a_table_without_the_optional_migration(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema, table = unique_name("mig4read"), "kv"
    target = await _table_before_migration_4(conn, schema, table)
    await conn.execute(
        sql.SQL("INSERT INTO {} (key, value) VALUES ('k', 'v'::bytea)").format(target)
    )
    async with PostgresStore(
        postgres_server.dsn(), schema=schema, table=table, migrate=False
    ) as reader:
        entry = await reader.get("k")
        assert entry is not None and entry.value == "v"
    assert await _applied(conn, schema, table) == BUT_4  # a reader migrates nothing


async def test_a_table_of_the_previous_schema_migrates_with_its_rows_and_swaps_exactly(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    """A table an oma before migration 4 made and wrote (with its generated value_sha256)
    loses the column and keeps every row; compare_and_set then compares the values
    themselves: equal bytes swap, a value differing in one byte does not."""
    schema, table = unique_name("mig4"), "kv"
    target = await _table_before_migration_4(conn, schema, table)
    old = "snapshot \ud800 é" * 3000
    await conn.execute(
        sql.SQL("INSERT INTO {} (key, value, metadata) VALUES (%s, %s, %s::json)").format(target),
        ("ckpt", old.encode("utf-8", "surrogatepass"), '{"v": 1}'),
    )
    assert "value_sha256" in await _columns(conn, schema, table)
    async with PostgresStore(postgres_server.dsn(), schema=schema, table=table) as store:
        entry = await store.get("ckpt")
        assert entry is not None and entry.value == old and entry.metadata == {"v": 1}
        assert await _applied(conn, schema, table) == LATEST
        assert "value_sha256" not in await _columns(conn, schema, table)
        same_length = old[:-1] + "è"  # one byte different, the same length
        assert not await store.compare_and_set("ckpt", same_length, "lost", {"v": 9})
        assert await store.compare_and_set("ckpt", old, "new", {"v": 2})
        assert not await store.compare_and_set("ckpt", old, "again")  # no longer the value
        entry = await store.get("ckpt")
        assert entry is not None and (entry.value, entry.metadata) == ("new", {"v": 2})


async def test_an_older_oma_s_swap_on_a_migrated_table_fails_loudly_and_writes_nothing(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    """An oma process from before migration 4 that still has the table open compares the
    dropped column: its statement is refused (a StoreError in that process), never a swap."""
    schema = unique_name("mig4old")
    async with PostgresStore(postgres_server.dsn(), schema=schema) as store:
        await store.set("k", "v1")
        older_swap = sql.SQL(
            "UPDATE {} SET value = %s WHERE key = %s AND value_sha256 = %s"
        ).format(sql.Identifier(schema, "oma_store"))
        with pytest.raises(psycopg.errors.UndefinedColumn):
            await conn.execute(older_swap, (b"v2", "k", hashlib.sha256(b"v1").digest()))
        entry = await store.get("k")
        assert entry is not None and entry.value == "v1"


async def test_odd_strings_round_trip(postgres_server: PostgresServer) -> None:
    async with PostgresStore(postgres_server.dsn(), schema=unique_name("odd")) as store:
        value = "nul\x00 and lone \ud800 surrogate"
        await store.set("k", value, {"nul": "\x00"})
        entry = await store.get("k")
        assert entry is not None and entry.value == value and entry.metadata == {"nul": "\x00"}
        assert await store.compare_and_set("k", value, "plain") is True
        with pytest.raises(StoreError, match="NUL") as refused:
            await store.set("key\x00with nul", "v")
        assert refused.value.transient is False and "Retrying will not help" in str(refused.value)


async def test_existing_pool_is_used_and_left_open(postgres_server: PostgresServer) -> None:
    async with AsyncConnectionPool(
        postgres_server.dsn(), min_size=1, max_size=4, kwargs={"autocommit": True}
    ) as pool:
        async with PostgresStore(pool, schema=unique_name("pool")) as store:
            await store.set("k", "v")
            assert await store.compare_and_set("k", "v", "w") is True
        assert not pool.closed


async def test_pool_without_autocommit_commits_too(postgres_server: PostgresServer) -> None:
    schema = unique_name("pool")
    async with AsyncConnectionPool(postgres_server.dsn(), min_size=1, max_size=2) as pool:
        store = PostgresStore(pool, schema=schema)
        await store.set("k", "v")
        assert await store.compare_and_set("k", "v", "w") is True
    async with PostgresStore(postgres_server.dsn(), schema=schema) as fresh:
        entry = await fresh.get("k")
        assert entry is not None and entry.value == "w"


@pytest.mark.parametrize("name", ["", "1abc", "a-b", 'x"; drop', "a" * 49])
def test_table_and_schema_names_are_checked(name: str) -> None:
    with pytest.raises(ValueError, match="must be 1-48 letters"):
        PostgresStore("postgresql://localhost/db", table=name)
    with pytest.raises(ValueError, match="must be 1-48 letters"):
        PostgresStore("postgresql://localhost/db", schema=name)


async def test_closed_port_is_unavailable_with_a_clear_message() -> None:
    dsn = f"postgresql://oma:hunter2-secret@127.0.0.1:{free_port()}/postgres"
    store = PostgresStore(dsn, connect_timeout=2)
    with pytest.raises(StoreUnavailableError) as caught:
        await store.get("k")
    await store.aclose()
    message = str(caught.value)
    assert "unreachable" in message and "Connection refused" in message
    assert "hunter2-secret" not in message and "***" in message
    assert caught.value.code == "STORE_UNAVAILABLE"
    assert caught.value.transient is True


async def test_closed_port_through_a_pool_is_unavailable_too() -> None:
    dsn = f"host=127.0.0.1 port={free_port()} user=oma password=hunter2-secret"
    pool: AsyncConnectionPool = AsyncConnectionPool(dsn, open=False, timeout=1)
    await pool.open(wait=False)
    try:
        store = PostgresStore(pool, connect_timeout=1)
        with pytest.raises(StoreUnavailableError) as caught:
            await store.set("k", "v")
    finally:
        await pool.close()
    assert "hunter2-secret" not in str(caught.value)
    assert "password=***" in str(caught.value)
    assert caught.value.transient is True


@pytest.mark.parametrize("user", ["oma", "nobody"])
async def test_bad_credentials_are_an_auth_error_without_the_password(
    postgres_server: PostgresServer, user: str
) -> None:
    dsn = postgres_server.dsn(password="wrong-pass-123").replace("//oma:", f"//{user}:")
    store = PostgresStore(dsn)
    with pytest.raises(StoreAuthError) as caught:
        await store.open()
    await store.aclose()
    message = str(caught.value)
    assert "wrong-pass-123" not in message and "password authentication failed" in message
    assert caught.value.code == "STORE_AUTH_FAILED"
    assert caught.value.transient is False


async def test_a_role_without_create_privilege_uses_a_migrated_table(
    postgres_server: PostgresServer, conn: psycopg.AsyncConnection
) -> None:
    schema, role = unique_name("least"), unique_name("app")
    async with PostgresStore(postgres_server.dsn(), schema=schema) as admin:
        await admin.set("k", "from admin")
    grants = [
        "CREATE ROLE {role} LOGIN PASSWORD 'app-pw'",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON {schema}.oma_store_migrations TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.oma_store TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.oma_store_jhead TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.oma_store_jrec TO {role}",
    ]
    for grant in grants:
        await conn.execute(
            sql.SQL(grant).format(role=sql.Identifier(role), schema=sql.Identifier(schema))
        )
    app_dsn = postgres_server.dsn(password="app-pw").replace("//oma:", f"//{role}:")
    async with PostgresStore(app_dsn, schema=schema) as app:
        assert await app.compare_and_set("k", "from admin", "from app") is True
        await app.set("other", "v")
        assert await app.journal_write("j", ["base"], version="v1", expected=None, replace=True)
        await app.delete("other")
        await app.delete("j")
        assert await app.journal_get("j") is None and await app.get("other") is None
    store = PostgresStore(app_dsn, schema=schema, table="not_created_yet")
    with pytest.raises(StoreError, match="permission denied"):
        await store.open()
    await store.aclose()


async def test_a_closed_store_fails_at_once_and_not_as_transient(
    postgres_server: PostgresServer,
) -> None:
    """Use after ``aclose()`` is not a lost server: no retries, and retrying cannot help."""
    store = PostgresStore(postgres_server.dsn(), schema=unique_name("closed"), retry_for=30)
    await store.set("k", "v")
    await store.aclose()
    started = asyncio.get_running_loop().time()
    with pytest.raises(StoreError, match="was closed") as caught:
        await store.get("k")
    assert asyncio.get_running_loop().time() - started < 5  # not retried for retry_for
    assert not isinstance(caught.value, StoreUnavailableError)
    assert caught.value.transient is False and "open a new store" in str(caught.value)


async def test_journal_records_in_binary_round_trip_odd_strings(
    postgres_server: PostgresServer,
) -> None:
    """Records travel as a binary bytea array: NUL, a lone surrogate, quotes, braces and
    backslashes (what a text array would have to escape) come back as written, appended,
    rebased and replaced."""
    odd = ["nul\x00", "lone \ud800", 'quote " and {brace}', "back\\slash, comma", "", "é" * 5000]
    async with PostgresStore(postgres_server.dsn(), schema=unique_name("jbin")) as store:
        assert await store.journal_write("j", odd, version="v1", expected=None, replace=True)
        assert await store.journal_write("j", odd[::-1], version="v2", expected="v1", replace=False)
        entry = await store.journal_get("j")
        assert entry is not None and entry.records == odd + odd[::-1]
        assert await store.journal_write(
            "j", odd[1:], version="v3", expected="v2", replace=False, rebase=True
        )
        entry = await store.journal_get("j", history=True)
        assert entry is not None and entry.records == odd + odd[::-1] + odd[1:]
