"""The journal capability of ``PostgresStore``: statements run on one of its connections.

A write is one transaction: the head row is compared and advanced first (its row lock orders
concurrent writers of a key, as ``SWAP`` does for entries), then the records are replaced or
appended. A writer that loses the comparison changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

import psycopg
from psycopg import sql

from oma import jsonutil
from oma.store import postgres_sql as q
from oma.store.base import Metadata
from oma.store.journal import JournalEntry

Compose = Any  # a callable turning a template into the store's composed statement


async def read(
    conn: psycopg.AsyncConnection[Any], statement: sql.Composed, key: str
) -> JournalEntry | None:
    cursor = await conn.execute(statement, {"key": key})
    rows = await cursor.fetchall()
    if not rows:
        return None
    version, metadata, created_at, _ = rows[0]
    return JournalEntry(
        key=key,
        records=[
            bytes(row[3]).decode("utf-8", "surrogatepass") for row in rows if row[3] is not None
        ],
        version=version,
        metadata=jsonutil.loads(metadata) if metadata is not None else None,
        created_at=created_at.astimezone(UTC),
    )


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
) -> bool:
    params: dict[str, Any] = {
        "key": key,
        "version": version,
        "expected": expected,
        "replace": replace,
        "count": len(records),
        "metadata": jsonutil.dumps(metadata) if metadata is not None else None,
        "records": [record.encode("utf-8", "surrogatepass") for record in records],
    }
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
        if replace:
            await conn.execute(compose(q.JOURNAL_DROP_RECORDS), params)
        await conn.execute(compose(q.JOURNAL_ADD_RECORDS), {**params, "start": start})
    return True
