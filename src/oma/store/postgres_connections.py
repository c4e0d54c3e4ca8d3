"""The connections of a ``PostgresStore`` built from a DSN: made on demand, in the task that
needs them, with nothing running in the background.

Why not a ``psycopg_pool`` pool: its background workers connect on their own, and a worker
that is connecting swallows ``CancelledError`` (psycopg_pool 3.3 ``_add_connection``), so an
event loop that ends while one connects waits forever in its shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from oma.errors import StoreError


class Connections:
    """Autocommit connections made on demand in the caller's task; no background tasks.

    A connection goes back to the idle list only when it is idle and healthy; a statement that
    failed, timed out or was cancelled closes its connection (its state is unknown). A failure
    that looks like a lost server also drops every idle connection, since a restarted server
    has closed them all.
    """

    def __init__(self, conninfo: str, max_size: int, connect_timeout: float) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(max_size)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._closed = False

    async def fill(self, count: int) -> None:
        while len(self._idle) < count and not self._closed:
            self._idle.append(await self._connect())

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._closed:
            # Not a lost server (not StoreUnavailableError): retrying cannot reopen it.
            raise StoreError(
                "this PostgresStore was closed (aclose) and cannot be used again: open a new store"
            )
        async with self._slots:
            conn = await self._take()
            try:
                yield conn
            except BaseException as exc:
                await _discard(conn)
                if isinstance(exc, psycopg.OperationalError | TimeoutError):
                    await self._drop_idle()
                raise
            if (
                self._closed
                or conn.closed
                or conn.info.transaction_status != TransactionStatus.IDLE
            ):
                await _discard(conn)
            else:
                self._idle.append(conn)

    async def close(self) -> None:
        self._closed = True
        await self._drop_idle()

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        while self._idle:
            conn = self._idle.pop()
            if _looks_alive(conn):
                return conn
            await _discard(conn)
        return await self._connect()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self._connect_timeout)),
        )

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _discard(conn)


def _looks_alive(conn: psycopg.AsyncConnection[Any]) -> bool:
    """An idle autocommit connection has nothing to read; EOF or a server message (e.g.
    "terminating connection due to administrator command") means the server let it go."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


async def _discard(conn: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(Exception):
        await conn.close()
