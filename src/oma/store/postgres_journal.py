"""The journal capability of ``PostgresStore``: statements run on one of its connections.

A write is one transaction: the head row is compared and advanced first (its row lock orders
concurrent writers of a key, as ``SWAP`` does for entries), then the records are replaced or
appended. A writer that loses the comparison changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

import psycopg
from psycopg import sql

from oma import jsonutil
from oma.errors import StoreCorruptError
from oma.store import damaged
from oma.store import postgres_sql as q
from oma.store.base import Metadata
from oma.store.journal import JournalEntry

Compose = Callable[[sql.SQL], bytes]  # a template made the store's statement


async def read(
    conn: psycopg.AsyncConnection[Any],
    statement: bytes,
    key: str,
    where: str,
    history: bool = False,
) -> JournalEntry | None:
    """The journal of ``key`` (from its base, or with ``history`` every record kept); damaged
    rows are a ``StoreCorruptError`` naming ``where`` (the store) and the key."""
    cursor = await conn.execute(statement, {"key": key, "history": history})
    rows = await cursor.fetchall()
    if not rows:
        return None
    where = f"{where}, journal"
    version, metadata, created_at, _, _, count, base, start = rows[0]
    if not 0 <= start <= base < count:
        raise corrupt(where, key, numbers_problem(count, base, start))
    first = start if history else base
    if rows[0][3] is None:  # the head joined no record: every write leaves the base record
        raise corrupt(where, key, "it has no records from its base on (in *_jrec)")
    for expected, row in enumerate(rows, start=first):
        if row[4] != expected:  # numbers never skip: a gap is a record lost
            raise corrupt(where, key, f"record {expected} is missing (in *_jrec)")
    if rows[-1][4] != count - 1:  # and run to the last one the head counts
        raise corrupt(where, key, f"record {rows[-1][4] + 1} of {count} is missing (in *_jrec)")
    return JournalEntry(
        key=key,
        records=[text(row[3], where, key, f"record {row[4]}") for row in rows],
        version=version,
        metadata=metadata_of(metadata, where, key),
        created_at=created_at.astimezone(UTC),
        start=first,
    )


# Rows read back are checked (``oma.store.damaged``); PostgresStore decodes its entries so too.
_STORE = "PostgresStore"


def corrupt(where: str, key: str, problem: str) -> StoreCorruptError:
    """The typed error for a damaged row of ``key`` in the store ``where``."""
    return damaged.corrupt(where, key, problem, _STORE)


def numbers_problem(count: int, base: int, start: int) -> str:
    """What is wrong with a head row whose numbers are not 0 <= start <= base < count."""
    return (
        f"its record count, base and start (in *_jhead: {count}, {base}, {start}) are not "
        "0 <= start <= base < count"
    )


def text(raw: bytes | memoryview, where: str, key: str, what: str) -> str:
    """A ``bytea`` column's UTF-8 text (lone surrogates pass, as written)."""
    return damaged.text(raw, where, key, what, _STORE)


def metadata_of(raw: str | None, where: str, key: str) -> Metadata | None:
    """A ``metadata::text`` column: a JSON object or NULL (the server checked the syntax;
    not the shape, nor a depth our parsers take)."""
    return damaged.metadata_of(raw, where, key, "its metadata", _STORE)


async def write(
    conn: psycopg.AsyncConnection[Any],
    compose: Compose,
    key: str,
    records: Sequence[str],
    *,
    version: str,
    expected: str | None,
    replace: bool,
    force: bool,
    metadata: Metadata | None,
    rebase: bool = False,
    drop_before: int | None = None,
) -> bool:
    params: dict[str, Any] = {
        "key": key,
        "version": version,
        "expected": expected,
        "replace": replace,
        "rebase": rebase,
        "drop_before": drop_before if rebase else None,
        "count": len(records),
        "metadata": jsonutil.dumps(metadata) if metadata is not None else None,
        "records": [record.encode("utf-8", "surrogatepass") for record in records],
    }
    if expected is not None and not (force or replace or rebase):
        cursor = await conn.execute(compose(q.JOURNAL_APPEND), params)
        return await cursor.fetchone() is not None
    async with conn.transaction():
        if force:
            await conn.execute(compose(q.JOURNAL_FORCE), params)
            start = 0
        elif expected is None:
            if not replace:
                return False
            cursor = await conn.execute(compose(q.JOURNAL_CREATE), params)
            if cursor.rowcount != 1:
                return False
            start = 0
        else:
            cursor = await conn.execute(compose(q.JOURNAL_ADVANCE), params)
            row = await cursor.fetchone()
            if row is None:
                return False
            start = 0 if replace else row[0]
            if params["drop_before"] is not None:
                await conn.execute(compose(q.JOURNAL_DROP_BEFORE), {**params, "start": row[1]})
        if replace:
            await conn.execute(compose(q.JOURNAL_DROP_RECORDS), params)
        await conn.execute(compose(q.JOURNAL_ADD_RECORDS), {**params, "start": start})
    return True
