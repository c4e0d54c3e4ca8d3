"""Schema migrations of ``PostgresStore`` tables, safe when many processes start at once.

A read-only check comes first: when every migration is recorded, nothing is locked or created,
so a role with only SELECT/INSERT/UPDATE/DELETE can use a table an administrator migrated.
Otherwise everything runs in one transaction under a transaction-scoped advisory lock: the
second process to arrive waits for the first to commit, then finds the versions recorded and
does nothing. (Plain ``CREATE TABLE IF NOT EXISTS`` is not enough: two concurrent ones can both
pass the check and one then fails on the catalog's unique index.)
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from oma.errors import StoreError
from oma.store import postgres_sql as q


async def migrate(
    conn: psycopg.AsyncConnection[Any], table: sql.Identifier, schema: str | None, name: str
) -> list[int]:
    """Bring ``table`` to the latest schema; returns the versions applied by this call."""
    store_table = f"{schema}.{name}" if schema else name
    migrations = (
        sql.Identifier(schema, q.MIGRATIONS_TABLE) if schema else sql.Identifier(q.MIGRATIONS_TABLE)
    )
    if await _up_to_date(conn, migrations, store_table):
        return []
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(q.LOCK, (q.MIGRATION_LOCK_KEY,))
        if schema:
            await conn.execute(q.CREATE_SCHEMA.format(schema=sql.Identifier(schema)))
        await conn.execute(q.CREATE_MIGRATIONS_TABLE.format(migrations=migrations))
        cursor = await conn.execute(
            q.APPLIED_VERSIONS.format(migrations=migrations), (store_table,)
        )
        applied = {row[0] for row in await cursor.fetchall()}
        _refuse_unknown(applied, store_table)
        for migration in q.MIGRATIONS:
            if migration.version in applied:
                continue
            for statement in migration.statements:
                await conn.execute(
                    statement.format(
                        table=table,
                        position_index=sql.Identifier(f"{name}_position_idx"),
                        journal=_beside(schema, name + q.JOURNAL_SUFFIX),
                        journal_records=_beside(schema, name + q.JOURNAL_RECORDS_SUFFIX),
                    )
                )
            await conn.execute(
                q.RECORD_MIGRATION.format(migrations=migrations),
                (store_table, migration.version, migration.description),
            )
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
    if not await _up_to_date(conn, migrations, store_table):
        raise StoreError(
            f"store table {store_table!r} is missing or not at oma's schema version "
            f"{max(_KNOWN)}, and this command only reads (it never creates or migrates "
            "tables): check --store (schema and table in its query, e.g. ?schema=runs), or "
            "let a writer (oma run, the runner) open it first"
        )


def _beside(schema: str | None, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


_KNOWN = {migration.version for migration in q.MIGRATIONS}


async def _up_to_date(
    conn: psycopg.AsyncConnection[Any], migrations: sql.Identifier, store_table: str
) -> bool:
    cursor = await conn.execute(q.FIND_TABLE, (migrations.as_string(conn),))
    row = await cursor.fetchone()
    if row is None or row[0] is None:
        return False
    cursor = await conn.execute(q.APPLIED_VERSIONS.format(migrations=migrations), (store_table,))
    applied = {version for (version,) in await cursor.fetchall()}
    _refuse_unknown(applied, store_table)
    return applied == _KNOWN


def _refuse_unknown(applied: set[int], store_table: str) -> None:
    if applied - _KNOWN:
        # A newer oma migrated this table; writing with older assumptions could break it.
        raise StoreError(
            f"store table {store_table!r} has schema versions {sorted(applied - _KNOWN)} "
            f"that this oma does not know (it knows up to {max(_KNOWN)}); upgrade oma."
        )
