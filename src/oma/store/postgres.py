"""``PostgresStore``: a ``MemoryStore`` in one PostgreSQL table, safe for any number of writers.

Each operation is one statement on an autocommit connection from a psycopg pool, so every
write is atomic and ``compare_and_set`` holds across processes. The table is created and
migrated on first use (see ``postgres_migrations``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from oma import jsonutil
from oma.errors import StoreError
from oma.store import postgres_sql as q
from oma.store.base import Entries, MemoryEntry, Metadata
from oma.store.postgres_migrations import migrate
from oma.store.remote import StoreAuthError, StoreUnavailableError, redact_url, scrub, sentence

T = TypeVar("T")
Row = tuple[str, bytes, str | None, datetime, int | None]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
# libpq reports a refused login with these; sqlstate is not always set for connect failures.
_AUTH_MARKERS = ("password authentication failed", "no password supplied", "pg_hba.conf")
_AUTH_STATES = ("28000", "28P01")


class PostgresStore:
    """Store in ``schema.table`` (default: ``oma_store`` on the search path).

    ``target`` is a libpq DSN (``postgresql://user:pw@host:5432/db?sslmode=verify-full&
    sslrootcert=/ca.pem`` or ``host=... user=...``) or an existing ``AsyncConnectionPool``
    (autocommit connections preferred; the pool's commit on return works too). A pool passed
    in stays the caller's: ``aclose()`` closes only a pool this store created.
    """

    def __init__(
        self,
        target: str | AsyncConnectionPool[Any],
        *,
        table: str = "oma_store",
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        for label, name in (("table", table), ("schema", schema)):
            if name is not None and not _IDENTIFIER.fullmatch(name):
                raise ValueError(f"{label} must match {_IDENTIFIER.pattern}, got {name!r}")
        self.table, self.schema = table, schema
        self.qualified_name = f"{schema}.{table}" if schema else table
        self._table = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        self._connect_timeout = connect_timeout
        if isinstance(target, str):
            self._conninfo: str | None = target
            self._where = redact_url(target)
            self._secrets = _conninfo_secrets(target, {})
            self._pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                target,
                min_size=min_size,
                max_size=max_size,
                open=False,
                timeout=connect_timeout,
                kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
                name=f"oma-store-{self.qualified_name}",
            )
            self._owns_pool = True
        else:
            self._conninfo = None
            # A pool may compute its conninfo / kwargs per connection (callables): then there
            # is nothing static to show, and nothing static to scrub.
            conninfo = target.conninfo if isinstance(target.conninfo, str) else ""
            kwargs = target.kwargs if isinstance(target.kwargs, dict) else {}
            self._where = redact_url(conninfo) if conninfo else "(pool with dynamic conninfo)"
            self._secrets = _conninfo_secrets(conninfo, kwargs)
            self._pool = target
            self._owns_pool = False
        self._ready = False
        self._ready_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, table={self.qualified_name!r})"

    async def open(self) -> None:
        """Connect and migrate now instead of on first use (typed errors if that fails)."""
        async with self._ready_lock:
            if self._ready:
                return
            if self._owns_pool:
                assert self._conninfo is not None
                # One plain connection first: its error says *why* (refused, bad password),
                # where a pool would only report a timeout.
                conn = await self._translate(self._connect_once(self._conninfo))
                async with conn:
                    await self._translate(migrate(conn, self._table, self.schema, self.table))
                await self._translate(self._pool.open(wait=True, timeout=self._connect_timeout))
            else:
                await self._run(lambda conn: migrate(conn, self._table, self.schema, self.table))
            self._ready = True

    async def get(self, key: str) -> MemoryEntry | None:
        rows = await self._idempotent(q.SELECT_ONE, {"key": key}, fetch=True)
        return _entry(rows[0]) if rows else None

    async def list(self) -> Entries:
        return [_entry(row) for row in await self._idempotent(q.SELECT_ALL, {}, fetch=True)]

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self._idempotent(q.UPSERT, _params(key, value, metadata, expires=None))

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        await self._idempotent(q.UPSERT, _params(key, value, metadata, expires=expires_at_turn))

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        params = _params(key, value, metadata, expires=None)
        if expected is None:
            statement = q.INSERT_IF_ABSENT
        else:
            statement = q.SWAP
            params["expected"] = hashlib.sha256(_encode(expected)).digest()
        await self.open()
        # Never retried: if the connection drops after the commit the swap happened, and a
        # second attempt would report False to the writer that won.
        rowcount = await self._run(lambda conn: _execute(conn, self._sql(statement), params))
        return rowcount == 1

    async def delete(self, key: str) -> None:
        await self._idempotent(q.DELETE_ONE, {"key": key})

    async def clear(self) -> None:
        await self._idempotent(q.DELETE_ALL, {})

    async def aclose(self) -> None:
        if self._owns_pool:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _sql(self, template: sql.SQL) -> sql.Composed:
        return template.format(table=self._table)

    async def _connect_once(self, conninfo: str) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=max(1, round(self._connect_timeout))
        )

    async def _idempotent(
        self, template: sql.SQL, params: dict[str, Any], *, fetch: bool = False
    ) -> Any:
        """Run one statement whose repetition is harmless, retrying on a dropped connection."""
        await self.open()
        statement = self._sql(template)

        async def once(conn: psycopg.AsyncConnection[Any]) -> Any:
            if fetch:
                return await _fetch(conn, statement, params)
            return await _execute(conn, statement, params)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(3),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            retry=retry_if_exception_type(StoreUnavailableError),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._run(once)
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _run(self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        async def on_connection() -> T:
            async with self._pool.connection() as conn:
                return await work(conn)

        return await self._translate(on_connection())

    async def _translate(self, call: Awaitable[T]) -> T:
        """Await a driver call, turning driver errors into typed store errors without secrets."""
        try:
            return await call
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"PostgreSQL at {self._where}: no connection within {self._connect_timeout}s: "
                f"{self._clean(exc)} Check that the server runs and accepts connections."
            ) from None
        except psycopg.OperationalError as exc:
            message = self._clean(exc)
            if exc.sqlstate in _AUTH_STATES or any(m in message for m in _AUTH_MARKERS):
                raise StoreAuthError(
                    f"PostgreSQL at {self._where} rejected the login: {message} Check the user "
                    "and password of the DSN (and pg_hba.conf)."
                ) from None
            raise StoreUnavailableError(
                f"PostgreSQL at {self._where} is unreachable: {message} Check that the server "
                "runs and the host, port and sslmode settings are right."
            ) from None
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL at {self._where} failed on {self.qualified_name!r}: {self._clean(exc)}"
            ) from None

    def _clean(self, exc: BaseException) -> str:
        return sentence(scrub(str(exc) or type(exc).__name__, self._secrets))


async def _execute(
    conn: psycopg.AsyncConnection[Any], statement: sql.Composed, params: dict[str, Any]
) -> int:
    cursor = await conn.execute(statement, params)
    return cursor.rowcount


async def _fetch(
    conn: psycopg.AsyncConnection[Any], statement: sql.Composed, params: dict[str, Any]
) -> list[Row]:
    cursor = await conn.execute(statement, params)
    return await cursor.fetchall()


def _conninfo_secrets(conninfo: str, kwargs: dict[str, Any]) -> tuple[str | None, ...]:
    try:
        parsed = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        parsed = {}
    return (str(parsed.get("password") or "") or None, str(kwargs.get("password") or "") or None)


def _encode(text: str) -> bytes:
    # surrogatepass: a Python str may hold lone surrogates (from JSON "\ud800"); they round-trip.
    return text.encode("utf-8", "surrogatepass")


def _params(
    key: str, value: str, metadata: Metadata | None, *, expires: int | None
) -> dict[str, Any]:
    return {
        "key": key,
        "value": _encode(value),
        "metadata": jsonutil.dumps(metadata) if metadata is not None else None,
        "expires": expires,
    }


def _entry(row: Row) -> MemoryEntry:
    key, value, metadata, created_at, expires_at_turn = row
    return MemoryEntry(
        key=key,
        value=bytes(value).decode("utf-8", "surrogatepass"),
        metadata=jsonutil.loads(metadata) if metadata is not None else None,
        created_at=created_at.astimezone(UTC),
        expires_at_turn=expires_at_turn,
    )
