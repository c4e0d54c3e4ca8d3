"""``PostgresStore``: a ``MemoryStore`` in one PostgreSQL table, safe for any number of writers.

Each operation is one statement on an autocommit connection, so every write is atomic and
``compare_and_set`` holds across processes. The table is created and migrated on first use
(see ``postgres_migrations``).

Given a DSN, the store keeps its own small set of connections (``Connections``) instead of a
``psycopg_pool`` pool: every connection is made in the task that needs it, under a deadline, and
nothing runs in the background. A pool's background workers connect on their own, and while one
is connecting it swallows ``CancelledError`` (psycopg_pool 3.3 ``_add_connection`` catches it and
schedules a retry), so a program that ends ``asyncio.run`` without ``aclose()`` at such a moment
waits forever in the loop's shutdown, which cancels every task and waits for each to finish.
With no background task there is nothing to wait for. Every operation is bounded: connecting
by ``connect_timeout``, the whole statement by ``command_timeout``; statements whose repetition
is harmless are retried for ``retry_for`` seconds (a server restart), and what is left is a
typed ``StoreUnavailableError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from oma import jsonutil
from oma.errors import StoreConfigError, StoreError
from oma.store import postgres_journal
from oma.store import postgres_sql as q
from oma.store.base import Entries, MemoryEntry, Metadata
from oma.store.capabilities import StoreCapabilities
from oma.store.journal import JournalEntry, JournalHead, JournalKeys, check_write
from oma.store.names import POSTGRES_IDENTIFIER
from oma.store.postgres_connections import Connections
from oma.store.postgres_migrations import migrate as run_migrations
from oma.store.postgres_migrations import require_migrated
from oma.store.remote import (
    StoreAuthError,
    StoreUnavailableError,
    encode_password,
    redact_url,
    scrub,
    sentence,
    url_passwords,
)

T = TypeVar("T")
Row = tuple[str, bytes, str | None, datetime, int | None]
_FIRST_WAIT = 0.05  # seconds before the first retry, doubled at each next one (up to 1 s)
_IDENTIFIER = re.compile(POSTGRES_IDENTIFIER)
# libpq reports a refused login with these; sqlstate is not always set for connect failures.
_AUTH_MARKERS = ("password authentication failed", "no password supplied", "pg_hba.conf")
_AUTH_STATES = ("28000", "28P01")


class PostgresStore:
    """Store in ``schema.table`` (default: ``oma_store`` on the search path).

    ``target`` is a libpq DSN (``postgresql://user:pw@host:5432/db?sslmode=verify-full&
    sslrootcert=/ca.pem`` or ``host=... user=...``) or an existing ``AsyncConnectionPool``
    (autocommit connections preferred; the pool's commit on return works too). A pool passed
    in stays the caller's: ``aclose()`` closes only connections this store made. (Close such a
    pool before the event loop ends: see the module docstring.)

    ``migrate=False``: the table must already be at the latest schema (a ``StoreError`` says
    so otherwise); nothing is created, migrated or locked (commands that only read use it).

    Bounds: ``connect_timeout`` per connection attempt, ``command_timeout`` per statement
    including getting its connection, ``retry_for`` seconds of retries for statements that can
    safely run twice. ``min_size`` connections are opened by ``open()``; at most ``max_size``
    are in use at once.
    """

    capabilities = StoreCapabilities(
        compare_and_set=True, expiry=True, journal=True, value_size=True
    )

    def __init__(
        self,
        target: str | AsyncConnectionPool[Any],
        *,
        table: str = "oma_store",
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        command_timeout: float = 30.0,
        retry_for: float = 10.0,
        migrate: bool = True,
    ) -> None:
        for label, name in (("table", table), ("schema", schema)):
            if name is not None and not _IDENTIFIER.fullmatch(name):
                raise StoreConfigError(
                    f"{label} must be 1-48 letters, digits or '_' not starting with a digit "
                    f"({_IDENTIFIER.pattern}), got {name!r}"
                )
        if not 0 <= min_size <= max_size or max_size < 1:
            raise StoreConfigError(
                f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}"
            )
        self.table, self.schema = table, schema
        self.qualified_name = f"{schema}.{table}" if schema else table
        self._table = _identifier(schema, table)
        self._journal = _identifier(schema, table + q.JOURNAL_SUFFIX)
        self._journal_records = _identifier(schema, table + q.JOURNAL_RECORDS_SUFFIX)
        self._statements: dict[int, tuple[sql.SQL, bytes]] = {}  # by the template's id
        self._connect_timeout = connect_timeout
        self._command_timeout = command_timeout
        self._retry_for = retry_for
        self._min_size = min_size
        self._connections: Connections | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        if isinstance(target, str):
            self._where = redact_url(target)
            self._secrets = (*_conninfo_secrets(target, {}), *url_passwords(target))
            if "://" in target:
                target = encode_password(target)
            self._connections = Connections(target, max_size, connect_timeout)
        else:
            # A pool may compute its conninfo / kwargs per connection (callables): then there
            # is nothing static to show, and nothing static to scrub.
            conninfo = target.conninfo if isinstance(target.conninfo, str) else ""
            kwargs = target.kwargs if isinstance(target.kwargs, dict) else {}
            self._where = redact_url(conninfo) if conninfo else "(pool with dynamic conninfo)"
            self._secrets = _conninfo_secrets(conninfo, kwargs)
            self._pool = target
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self.migrates = migrate

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, table={self.qualified_name!r})"

    async def open(self) -> None:
        """Connect and migrate now instead of on first use (typed errors if that fails)."""
        async with self._ready_lock:
            if self._ready:
                return
            if not self.migrates:  # e.g. a command that only reads: it checks, never creates
                await self._run(
                    lambda conn: require_migrated(conn, self.schema, self.table), retry=True
                )
            else:  # migrating waits for a concurrent migrator's lock: bounded like a statement
                await self._run(
                    lambda conn: run_migrations(conn, self._table, self.schema, self.table),
                    retry=True,
                )
            if self._connections is not None:
                await self._translate(self._connections.fill(self._min_size))
            self._ready = True

    async def get(self, key: str) -> MemoryEntry | None:
        rows = await self._idempotent(q.SELECT_ONE, {"key": key}, fetch=True)
        return _entry(rows[0], self._label) if rows else None

    async def value_size(self, key: str) -> int | None:
        # octet_length of a bytea reads its stored length, not the (TOASTed) value.
        rows = await self._idempotent(q.SELECT_SIZE, {"key": key}, fetch=True)
        return int(rows[0][0]) if rows else None

    async def list(self) -> Entries:
        rows = await self._idempotent(q.SELECT_ALL, {}, fetch=True)
        return [_entry(row, self._label) for row in rows]

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
            params["expected"] = _encode(expected)
        await self.open()
        swap = self._sql(statement)

        async def once(conn: psycopg.AsyncConnection[Any]) -> bool:
            return await _execute(conn, swap, params) == 1

        try:
            # Retried only while no connection was had (nothing sent): once the statement went
            # out, the swap may have happened, and a second one would report False to the
            # writer that won.
            return await self._run(once, retry=False)
        except StoreUnavailableError:
            return await self._settle_swap(key, expected, value, once)

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        await self.open()
        statement = self._sql(q.JOURNAL_READ)
        result: JournalEntry | None = await self._run(
            lambda conn: postgres_journal.read(conn, statement, key, self._label, history),
            retry=True,
        )
        return result

    async def journal_version(self, key: str) -> str | None:
        rows = await self._idempotent(q.JOURNAL_VERSION, {"key": key}, fetch=True)
        return str(rows[0][0]) if rows else None

    async def journal_head(self, key: str) -> JournalHead | None:
        rows = await self._idempotent(q.JOURNAL_HEAD, {"key": key}, fetch=True)
        if not rows:
            return None
        records, version, metadata, created_at, base, start = rows[0]
        where = f"{self._label}, journal"
        if not 0 <= start <= base < records:  # every write leaves at least the base record
            problem = postgres_journal.numbers_problem(records, base, start)
            raise postgres_journal.corrupt(where, key, problem)
        return JournalHead(
            key=key,
            records=records - base,
            base=base,
            start=start,
            version=version,
            metadata=postgres_journal.metadata_of(metadata, where, key),
            created_at=created_at.astimezone(UTC),
        )

    async def journal_write(
        self,
        key: str,
        records: Sequence[str],
        *,
        version: str,
        expected: str | None,
        replace: bool,
        force: bool = False,
        metadata: Metadata | None = None,
        rebase: bool = False,
        drop_before: int | None = None,
    ) -> bool:
        check_write(records, replace=replace, force=force, rebase=rebase, drop_before=drop_before)
        await self.open()

        async def once(conn: psycopg.AsyncConnection[Any]) -> bool:
            return await postgres_journal.write(
                conn,
                self._sql,
                key,
                records,
                version=version,
                expected=expected,
                replace=replace,
                force=force,
                metadata=metadata,
                rebase=rebase,
                drop_before=drop_before,
            )

        try:
            # Only a forced replacement may simply run twice; a compared write that lost its
            # connection is settled by the version, which never repeats (as in RedisStore).
            return await self._run(once, retry=force)
        except StoreUnavailableError:
            if force:  # already retried for retry_for seconds: the store is down, say so
                raise
            current = await self.journal_version(key)
            if current == version:
                return True
            if current != expected:
                return False
            return await self._run(once, retry=False)

    async def journal_keys(self) -> JournalKeys:
        rows = await self._idempotent(q.JOURNAL_KEYS, {}, fetch=True)
        return [str(row[0]) for row in rows]

    async def delete(self, key: str) -> None:
        await self._idempotent(q.DELETE_ONE, {"key": key})

    async def clear(self) -> None:
        await self._idempotent(q.DELETE_ALL, {})

    async def aclose(self) -> None:
        if self._connections is not None:
            await self._connections.close()

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

    def _sql(self, template: sql.SQL) -> bytes:
        """``template`` with this store's table names, composed once: a boundary's write
        otherwise spent a tenth of its time in formatting and quoting the same statement."""
        known = self._statements.get(id(template))
        if known is not None and known[0] is template:
            return known[1]
        statement = template.format(
            table=self._table, journal=self._journal, journal_records=self._journal_records
        )
        # Identifiers only: quoted by psycopg without a connection's encoding.
        composed = statement.as_bytes(None)
        self._statements[id(template)] = (template, composed)  # kept: its id stays its own
        return composed

    async def _settle_swap(
        self,
        key: str,
        expected: str | None,
        value: str,
        swap: Callable[[psycopg.AsyncConnection[Any]], Awaitable[bool]],
    ) -> bool:
        """After a compare_and_set whose answer never came (as in ``RedisStore``): done if the
        row holds our value, lost if it holds neither value, else (not applied) sent again;
        for ``retry_for`` seconds, then the outage is the caller's."""
        select = self._sql(q.SELECT_ONE)
        retrying = AsyncRetrying(
            stop=stop_after_delay(self._retry_for),
            wait=wait_exponential(multiplier=_FIRST_WAIT, max=1.0),
            retry=retry_if_exception_type(StoreUnavailableError),
            reraise=True,
        )

        async def current() -> str | None:
            rows = await self._try(lambda conn: _fetch(conn, select, {"key": key}))
            return _entry(rows[0], self._label).value if rows else None

        async for attempt in retrying:
            with attempt:
                found = await current()
                if found == value:
                    return True
                if found != expected:
                    return False
                if await self._try(swap):
                    return True
                # The first statement may still have been running on the server (waiting on
                # a lock, or for a synchronous standby): ours then waited for it and found
                # the row changed, perhaps by that very statement.
                return await current() == value
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _try(self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``work`` once (a retry loop of its own is the caller's)."""
        try:
            return await self._once(work, retry=True)
        except _Retryable as exc:
            raise exc.error from None

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

        return await self._run(once, retry=True)

    async def _run(
        self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], *, retry: bool
    ) -> T:
        """``work`` on a connection, bounded in time, with typed errors.

        ``retry``: the work may run twice, so any unavailability is retried (for ``retry_for``
        seconds once the store has opened). Otherwise only getting a connection is retried
        (nothing was sent yet).
        """
        try:
            return await self._once(work, retry=retry)  # the usual case: no retry loop to set up
        except _Retryable:
            await asyncio.sleep(_FIRST_WAIT)
        # Before the store has worked once, a failure is most likely a wrong DSN or a server
        # that is not there: say so quickly. Afterwards it is most likely a restart: ride it out.
        stop = stop_after_delay(self._retry_for) if self._ready else stop_after_attempt(2)
        retrying = AsyncRetrying(
            stop=stop | stop_after_attempt(49),
            wait=wait_exponential(multiplier=_FIRST_WAIT, max=1.0),
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(work, retry=retry)
        except _Retryable as exc:
            raise exc.error from None
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _once(
        self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], *, retry: bool
    ) -> T:
        sent = False

        async def on_connection() -> T:
            nonlocal sent
            async with asyncio.timeout(self._command_timeout):
                async with self._connection() as conn:
                    sent = True
                    return await work(conn)

        try:
            return await self._translate(on_connection())
        except StoreUnavailableError as exc:
            if retry or not sent:
                raise _Retryable(exc) from None
            raise

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._connections is not None:
            async with self._connections.connection() as conn:
                yield conn
        else:
            assert self._pool is not None
            async with self._pool.connection(timeout=self._connect_timeout) as conn:
                yield conn

    async def _translate(self, call: Awaitable[T]) -> T:
        """Await a driver call, turning driver errors into typed store errors without secrets."""
        try:
            return await call
        except TimeoutError:
            raise StoreUnavailableError(
                f"PostgreSQL at {self._where}: no answer within {self._command_timeout}s on "
                f"{self.qualified_name!r}. Check that the server runs and is not overloaded, "
                "and that no other session holds a lock on the table (pg_locks)."
            ) from None
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
            # Connection losses, timeouts, deadlocks, serialization failures, shutdowns and
            # "too many connections" are OperationalErrors (above); what is left is refused
            # for a reason retrying does not change (privileges, data, schema).
            raise StoreError(
                f"PostgreSQL at {self._where} failed on {self.qualified_name!r}: "
                f"{self._clean(exc)} Retrying will not help: check the role's privileges on "
                "the table, the value written and the server's log."
            ) from None

    def _clean(self, exc: BaseException) -> str:
        return sentence(scrub(str(exc) or type(exc).__name__, self._secrets))

    @property
    def _label(self) -> str:
        """The store as damaged-data messages name it (password masked)."""
        return f"PostgreSQL at {self._where}, table {self.qualified_name!r}"


class _Retryable(Exception):
    """Carries a ``StoreUnavailableError`` that may be retried (tenacity retries on type)."""

    def __init__(self, error: StoreUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


async def _execute(
    conn: psycopg.AsyncConnection[Any], statement: bytes, params: dict[str, Any]
) -> int:
    cursor = await conn.execute(statement, params)
    return cursor.rowcount


async def _fetch(
    conn: psycopg.AsyncConnection[Any], statement: bytes, params: dict[str, Any]
) -> list[Row]:
    # Binary results: a bytea value comes as its bytes, not as hex text twice its size that
    # the driver must decode (3.5 ms of a 1 MB read).
    cursor = await conn.execute(statement, params, binary=True)
    return await cursor.fetchall()


def _conninfo_secrets(conninfo: str, kwargs: dict[str, Any]) -> tuple[str | None, ...]:
    try:
        parsed = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        parsed = {}
    return (str(parsed.get("password") or "") or None, str(kwargs.get("password") or "") or None)


def _identifier(schema: str | None, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


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


def _entry(row: Row, where: str) -> MemoryEntry:
    """One row of ``SELECT_ONE`` / ``SELECT_ALL``; a damaged one (a value that is not UTF-8,
    metadata that is not a JSON object) is a ``StoreCorruptError`` naming ``where`` and the
    key: a listing fails rather than leave it out."""
    key, value, metadata, created_at, expires_at_turn = row
    return MemoryEntry(
        key=key,
        value=postgres_journal.text(value, where, key, "its value"),
        metadata=postgres_journal.metadata_of(metadata, where, key),
        created_at=created_at.astimezone(UTC),
        expires_at_turn=expires_at_turn,
    )
