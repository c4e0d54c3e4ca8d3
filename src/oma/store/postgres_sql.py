"""SQL of ``PostgresStore``: the statements and the append-only list of schema migrations.

Templates take ``{table}`` (the schema-qualified store table) and, for migrations,
``{position_index}``; identifiers are quoted by ``psycopg.sql``, never pasted as text.

Never edit or reorder a released migration: a database records the versions it has applied and
only runs the ones it has not seen. Change the schema by appending a migration.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

# Any constant 64-bit key works; it only has to be the same in every oma process.
MIGRATION_LOCK_KEY = 0x6F6D615F6D696772  # "oma_migr"
MIGRATIONS_TABLE = "oma_store_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[sql.SQL, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "create the store table",
        (
            # value is bytea, not text: text refuses NUL characters, and a store takes any string.
            # value_sha256 is computed by the server, so it can never disagree with value;
            # compare_and_set compares it with sha256(expected) computed by the client.
            # metadata is json, not jsonb: json keeps the document exactly as written.
            sql.SQL(
                """
                CREATE TABLE {table} (
                    key             text PRIMARY KEY,
                    position        bigint GENERATED ALWAYS AS IDENTITY,
                    value           bytea NOT NULL,
                    value_sha256    bytea GENERATED ALWAYS AS (sha256(value)) STORED,
                    metadata        json,
                    expires_at_turn bigint,
                    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
                    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp()
                )
                """
            ),
        ),
    ),
    Migration(
        2,
        "index the insertion order that list() sorts by",
        (sql.SQL("CREATE UNIQUE INDEX {position_index} ON {table} (position)"),),
    ),
)

LOCK = sql.SQL("SELECT pg_advisory_xact_lock(%s)")
CREATE_SCHEMA = sql.SQL("CREATE SCHEMA IF NOT EXISTS {schema}")
CREATE_MIGRATIONS_TABLE = sql.SQL(
    """
    CREATE TABLE IF NOT EXISTS {migrations} (
        store_table text NOT NULL,
        version     integer NOT NULL,
        description text NOT NULL,
        applied_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
        PRIMARY KEY (store_table, version)
    )
    """
)
FIND_TABLE = sql.SQL("SELECT to_regclass(%s)")
APPLIED_VERSIONS = sql.SQL("SELECT version FROM {migrations} WHERE store_table = %s")
RECORD_MIGRATION = sql.SQL(
    "INSERT INTO {migrations} (store_table, version, description) VALUES (%s, %s, %s)"
)

_COLUMNS = "key, value, metadata::text, created_at, expires_at_turn"

SELECT_ONE = sql.SQL(f"SELECT {_COLUMNS} FROM {{table}} WHERE key = %(key)s")
SELECT_ALL = sql.SQL(f"SELECT {_COLUMNS} FROM {{table}} ORDER BY position")

# created_at and position are left alone on conflict: an update keeps both.
UPSERT = sql.SQL(
    """
    INSERT INTO {table} (key, value, metadata, expires_at_turn)
    VALUES (%(key)s, %(value)s, %(metadata)s::json, %(expires)s)
    ON CONFLICT (key) DO UPDATE SET
        value = EXCLUDED.value,
        metadata = EXCLUDED.metadata,
        expires_at_turn = EXCLUDED.expires_at_turn,
        updated_at = statement_timestamp()
    """
)

# compare_and_set(expected=None): the primary key makes exactly one concurrent insert win.
INSERT_IF_ABSENT = sql.SQL(
    """
    INSERT INTO {table} (key, value, metadata)
    VALUES (%(key)s, %(value)s, %(metadata)s::json)
    ON CONFLICT (key) DO NOTHING
    """
)

# compare_and_set(expected=str): one statement. A concurrent swap holding the row lock makes
# this one wait, then re-check the WHERE clause against the new row version (READ COMMITTED),
# so of N racing swaps from the same expected value exactly one updates a row.
SWAP = sql.SQL(
    """
    UPDATE {table} SET
        value = %(value)s,
        metadata = %(metadata)s::json,
        expires_at_turn = NULL,
        updated_at = statement_timestamp()
    WHERE key = %(key)s AND value_sha256 = %(expected)s
    """
)

DELETE_ONE = sql.SQL("DELETE FROM {table} WHERE key = %(key)s")
# DELETE, not TRUNCATE: TRUNCATE takes an exclusive lock that would stall concurrent readers.
DELETE_ALL = sql.SQL("DELETE FROM {table}")
