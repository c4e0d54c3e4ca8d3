"""Schema migrations of ``PostgresStore`` tables, safe when many processes start at once.

A read-only check comes first: when every migration is recorded, nothing is locked or created,
so a role with only SELECT/INSERT/UPDATE/DELETE can use a table an administrator migrated.
Otherwise everything runs in one transaction under a transaction-scoped advisory lock: the
second process to arrive waits for the first to commit, then finds the versions recorded and
does nothing. (Plain ``CREATE TABLE IF NOT EXISTS`` is not enough: two concurrent ones can both
pass the check and one then fails on the catalog's unique index.)

Inside that transaction every lock is waited for at most ``LOCK_TIMEOUT_MS``: a migration that
alters an existing table needs its strongest lock, and waiting behind a long transaction would
queue every other statement on the table behind it. A required migration that cannot run (its
lock, or a role that may not alter the table) fails the open with a typed error saying what it
needs; an optional one (``Migration.optional``: the table works without it) is skipped with a
warning and tried again at the next open.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from oma.errors import StoreError
from oma.store import postgres_sql as q

log = logging.getLogger(__name__)
LOCK_TIMEOUT_MS = 2000


async def migrate(
    conn: psycopg.AsyncConnection[Any], table: sql.Identifier, schema: str | None, name: str
) -> list[int]:
    """Bring ``table`` to the latest schema; returns the versions applied by this call."""
    store_table = f"{schema}.{name}" if schema else name
    migrations = (
        sql.Identifier(schema, q.MIGRATIONS_TABLE) if schema else sql.Identifier(q.MIGRATIONS_TABLE)
    )
    if await _up_to_date(conn, migrations, store_table, _KNOWN):
        return []
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(q.LOCK, (q.MIGRATION_LOCK_KEY,))
        timeout = sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{LOCK_TIMEOUT_MS}ms"))
        await conn.execute(timeout)
        # Created only when missing: CREATE ... IF NOT EXISTS checks the privilege to create
        # first, which a role that only uses a migrated table does not have.
        if schema and not await _found(conn, q.FIND_SCHEMA, sql.Identifier(schema)):
            await _run(conn, q.CREATE_SCHEMA.format(schema=sql.Identifier(schema)), store_table)
        if not await _found(conn, q.FIND_TABLE, migrations):
            await _run(conn, q.CREATE_MIGRATIONS_TABLE.format(migrations=migrations), store_table)
        cursor = await conn.execute(
            q.APPLIED_VERSIONS.format(migrations=migrations), (store_table,)
        )
        applied = {row[0] for row in await cursor.fetchall()}
        _refuse_unknown(applied, store_table)
        for migration in q.MIGRATIONS:
            if migration.version in applied:
                continue
            statements = [
                statement.format(
                    table=table,
                    position_index=sql.Identifier(f"{name}_position_idx"),
                    journal=_beside(schema, name + q.JOURNAL_SUFFIX),
                    journal_records=_beside(schema, name + q.JOURNAL_RECORDS_SUFFIX),
                )
                for statement in migration.statements
            ]
            record = q.RECORD_MIGRATION.format(migrations=migrations)
            params = (store_table, migration.version, migration.description)
            if not migration.optional:
                for statement in statements:
                    await _run(conn, statement, store_table, migration)
                await conn.execute(record, params)
                applied_now.append(migration.version)
                continue
            try:
                async with conn.transaction():  # a savepoint: skipped, it leaves nothing
                    for statement in statements:
                        await conn.execute(statement)
                    await conn.execute(record, params)
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.LockNotAvailable) as exc:
                log.warning(
                    "store table %r: optional schema migration %d (%s) not applied: %s. The "
                    "table works without it; it is tried again at the next open. %s",
                    store_table,
                    migration.version,
                    migration.description,
                    str(exc).strip().splitlines()[0],
                    _NEEDS,
                )
            else:
                applied_now.append(migration.version)
    return applied_now


async def require_migrated(
    conn: psycopg.AsyncConnection[Any], schema: str | None, name: str
) -> None:
    """For a read-only user: the table is at the latest schema, or a ``StoreError`` says why
    (nothing is created or locked)."""
    store_table = f"{schema}.{name}" if schema else name
    migrations = (
        sql.Identifier(schema, q.MIGRATIONS_TABLE) if schema else sql.Identifier(q.MIGRATIONS_TABLE)
    )
    if not await _up_to_date(conn, migrations, store_table, _REQUIRED):
        raise StoreError(
            f"store table {store_table!r} is missing or not at oma's schema version "
            f"{max(_REQUIRED)}, and this command only reads (it never creates or migrates "
            "tables): check --store (schema and table in its query, e.g. ?schema=runs), or "
            "let a writer (oma run, the runner) open it first"
        )


def _beside(schema: str | None, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


_KNOWN = {migration.version for migration in q.MIGRATIONS}
_REQUIRED = {migration.version for migration in q.MIGRATIONS if not migration.optional}
_NEEDS = (
    "A migration needs a role that owns the table (and may create in its schema): start one oma "
    "(oma run, a runner, or the operator) with such a role once."
)


async def _up_to_date(
    conn: psycopg.AsyncConnection[Any],
    migrations: sql.Identifier,
    store_table: str,
    needed: set[int],
) -> bool:
    """Whether every version of ``needed`` is recorded (and none this oma does not know)."""
    if not await _found(conn, q.FIND_TABLE, migrations):
        return False
    cursor = await conn.execute(q.APPLIED_VERSIONS.format(migrations=migrations), (store_table,))
    applied = {version for (version,) in await cursor.fetchall()}
    _refuse_unknown(applied, store_table)
    return needed <= applied


async def _found(conn: psycopg.AsyncConnection[Any], query: sql.SQL, name: sql.Identifier) -> bool:
    cursor = await conn.execute(query, (name.as_string(conn),))
    row = await cursor.fetchone()
    return row is not None and row[0] is not None


async def _run(
    conn: psycopg.AsyncConnection[Any],
    statement: sql.Composed,
    store_table: str,
    migration: q.Migration | None = None,
) -> None:
    """A statement of a required migration; a role that may not run it gets a ``StoreError``
    that says what is pending and what it needs."""
    try:
        await conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        what = (
            f"schema migration {migration.version} ({migration.description})"
            if migration is not None
            else "its schema and migration records"
        )
        raise StoreError(
            f"store table {store_table!r} needs {what}, which role "
            f"{conn.info.user!r} may not run: {str(exc).strip().splitlines()[0]}. {_NEEDS}"
        ) from None


def _refuse_unknown(applied: set[int], store_table: str) -> None:
    if applied - _KNOWN:
        # A newer oma migrated this table; writing with older assumptions could break it.
        raise StoreError(
            f"store table {store_table!r} has schema versions {sorted(applied - _KNOWN)} "
            f"that this oma does not know (it knows up to {max(_KNOWN)}); upgrade oma."
        )
