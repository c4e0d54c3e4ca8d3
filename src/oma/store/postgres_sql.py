"""SQL of ``PostgresStore``: the statements and the append-only list of schema migrations.

Templates take ``{table}`` (the schema-qualified store table), ``{journal}`` and
``{journal_records}`` (its journals' tables, named after it) and, for migrations,
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
    # Optional: the table works as well without it (a speed-up). A role that may not run it,
    # or a lock not had in time, skips it with a warning; later migrations must not need it.
    optional: bool = False


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "create the store table",
        (
            # value is bytea, not text: text refuses NUL characters, and a store takes any string.
            # value_sha256 is computed by the server, so it can never disagree with value;
            # compare_and_set compared it with sha256(expected) computed by the client (until
            # migration 4 dropped it: the swap compares the value itself).
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
    Migration(
        3,
        "create the journal tables",
        (
            # version is chosen by the writer and never repeats; a write compares it in one
            # UPDATE under the row lock (as SWAP does), then adds or replaces the records.
            sql.SQL(
                """
                CREATE TABLE {journal} (
                    key        text PRIMARY KEY,
                    version    text NOT NULL,
                    records    integer NOT NULL,
                    metadata   json,
                    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
                    updated_at timestamptz NOT NULL DEFAULT statement_timestamp()
                )
                """
            ),
            sql.SQL(
                """
                CREATE TABLE {journal_records} (
                    key    text NOT NULL REFERENCES {journal} (key) ON DELETE CASCADE,
                    seq    integer NOT NULL,
                    record bytea NOT NULL,
                    PRIMARY KEY (key, seq)
                )
                """
            ),
        ),
    ),
    Migration(
        4,
        "compare values directly: drop the generated value_sha256 column",
        (
            # The column was computed on every write, twice for an upsert (the speculative
            # insert and the update: a third of a 100 KB set), to serve only compare_and_set,
            # which now compares the value itself (SWAP): cheaper than the hash even with the
            # expected value sent. Metadata only: no rewrite of the table.
            sql.SQL("ALTER TABLE {table} DROP COLUMN IF EXISTS value_sha256"),
        ),
        optional=True,  # SWAP compares values, so it works with the column there too
    ),
    Migration(
        5,
        "journals keep a history: the base's and the first kept record's numbers",
        (
            # Metadata only (a constant default): no rewrite of the table. A journal written
            # before reads as base 0, start 0: the whole list, as it was read then.
            sql.SQL(
                "ALTER TABLE {journal} ADD COLUMN base integer NOT NULL DEFAULT 0, "
                "ADD COLUMN start integer NOT NULL DEFAULT 0"
            ),
        ),
    ),
)
# Suffixes of the journal tables' names: with the longest table name (48) they fit in 63 bytes.
JOURNAL_SUFFIX = "_jhead"
JOURNAL_RECORDS_SUFFIX = "_jrec"

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
FIND_SCHEMA = sql.SQL("SELECT to_regnamespace(%s)")
APPLIED_VERSIONS = sql.SQL("SELECT version FROM {migrations} WHERE store_table = %s")
RECORD_MIGRATION = sql.SQL(
    "INSERT INTO {migrations} (store_table, version, description) VALUES (%s, %s, %s)"
)

_COLUMNS = "key, value, metadata::text, created_at, expires_at_turn"

SELECT_ONE = sql.SQL(f"SELECT {_COLUMNS} FROM {{table}} WHERE key = %(key)s")
SELECT_ALL = sql.SQL(f"SELECT {_COLUMNS} FROM {{table}} ORDER BY position")
SELECT_SIZE = sql.SQL("SELECT octet_length(value) FROM {table} WHERE key = %(key)s")

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
# so of N racing swaps from the same expected value exactly one updates a row. The stored
# value is compared byte for byte with the expected one (bytea equality).
SWAP = sql.SQL(
    """
    UPDATE {table} SET
        value = %(value)s,
        metadata = %(metadata)s::json,
        expires_at_turn = NULL,
        updated_at = statement_timestamp()
    WHERE key = %(key)s AND value = %(expected)s
    """
)

# One statement each, so the entry and the journal of a key go together (records cascade).
DELETE_ONE = sql.SQL(
    """
    WITH journal AS (DELETE FROM {journal} WHERE key = %(key)s)
    DELETE FROM {table} WHERE key = %(key)s
    """
)
# DELETE, not TRUNCATE: TRUNCATE takes an exclusive lock that would stall concurrent readers.
DELETE_ALL = sql.SQL("WITH journal AS (DELETE FROM {journal}) DELETE FROM {table}")

# Journals. A read is one statement: one snapshot of the head and its records.
JOURNAL_READ = sql.SQL(
    """
    SELECT h.version, h.metadata::text, h.created_at, r.record, r.seq, h.records, h.base, h.start
    FROM {journal} h LEFT JOIN {journal_records} r
        ON r.key = h.key AND r.seq >= CASE WHEN %(history)s THEN h.start ELSE h.base END
    WHERE h.key = %(key)s
    ORDER BY r.seq
    """
)
JOURNAL_VERSION = sql.SQL("SELECT version FROM {journal} WHERE key = %(key)s")
JOURNAL_HEAD = sql.SQL(
    """
    SELECT records, version, metadata::text, created_at, base, start
    FROM {journal} WHERE key = %(key)s
    """
)
JOURNAL_KEYS = sql.SQL("SELECT key FROM {journal} ORDER BY key")
JOURNAL_CREATE = sql.SQL(
    """
    INSERT INTO {journal} (key, version, records, metadata)
    VALUES (%(key)s, %(version)s, %(count)s, %(metadata)s::json)
    ON CONFLICT (key) DO NOTHING
    """
)
JOURNAL_FORCE = sql.SQL(
    """
    INSERT INTO {journal} (key, version, records, metadata)
    VALUES (%(key)s, %(version)s, %(count)s, %(metadata)s::json)
    ON CONFLICT (key) DO UPDATE SET
        version = EXCLUDED.version,
        records = EXCLUDED.records,
        metadata = EXCLUDED.metadata,
        base = 0,
        start = 0,
        updated_at = statement_timestamp()
    """
)
# Returns the number of records before this write (where appended records start) and the
# first record kept after it. (On the right of SET, columns are their values before the write.)
JOURNAL_ADVANCE = sql.SQL(
    """
    UPDATE {journal} SET
        version = %(version)s,
        records = CASE WHEN %(replace)s THEN %(count)s ELSE records + %(count)s END,
        base = CASE WHEN %(replace)s THEN 0 WHEN %(rebase)s THEN records ELSE base END,
        start = CASE
            WHEN %(replace)s THEN 0
            WHEN %(drop_before)s::integer > start THEN LEAST(%(drop_before)s::integer, records)
            ELSE start
        END,
        metadata = %(metadata)s::json,
        updated_at = statement_timestamp()
    WHERE key = %(key)s AND version = %(expected)s
    RETURNING records - %(count)s, start
    """
)
# Records travel in binary (``%(records)b``): as text, psycopg writes each byte of a bytea array
# as two hex digits and quotes every element, about a tenth of a boundary's write at ~1 KB.
# A plain append (the write of nearly every boundary) as one statement: the version compared
# and advanced, the records added after the ones there, in one round trip and one commit (a
# transaction around the two statements cost a BEGIN and a COMMIT more). One row when the
# version matched, none when another writer changed it (then nothing was added).
JOURNAL_APPEND = sql.SQL(
    """
    WITH head AS (
        UPDATE {journal} SET
            version = %(version)s,
            records = records + %(count)s,
            metadata = %(metadata)s::json,
            updated_at = statement_timestamp()
        WHERE key = %(key)s AND version = %(expected)s
        RETURNING records - %(count)s AS first
    ), added AS (
        INSERT INTO {journal_records} (key, seq, record)
        SELECT %(key)s, head.first + t.ord - 1, t.record
        FROM head, unnest(%(records)b::bytea[]) WITH ORDINALITY AS t (record, ord)
    )
    SELECT first FROM head
    """
)
JOURNAL_DROP_BEFORE = sql.SQL(
    "DELETE FROM {journal_records} WHERE key = %(key)s AND seq < %(start)s"
)
JOURNAL_DROP_RECORDS = sql.SQL("DELETE FROM {journal_records} WHERE key = %(key)s")
JOURNAL_ADD_RECORDS = sql.SQL(
    """
    INSERT INTO {journal_records} (key, seq, record)
    SELECT %(key)s, %(start)s + t.ord - 1, t.record
    FROM unnest(%(records)b::bytea[]) WITH ORDINALITY AS t (record, ord)
    """
)
