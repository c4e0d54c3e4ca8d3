"""``RedisStore``: a ``MemoryStore`` in a Redis server, safe for any number of writers.

Mutations are Lua scripts (see ``redis_scripts``; ``set`` sends the value beside its script
in one MULTI), so each is atomic on the server and ``compare_and_set`` holds across processes
and machines. The script compares sha256 digests:
the client hashes ``expected`` locally and sends 64 hex characters, never the expected value.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    ClusterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
    WatchError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from oma import jsonutil
from oma.errors import StoreConfigError, StoreError
from oma.store import damaged, redis_rows, redis_scripts
from oma.store.base import Entries, MemoryEntry, Metadata
from oma.store.capabilities import StoreCapabilities
from oma.store.digests import DigestMemo
from oma.store.journal import JournalEntry, JournalHead, JournalKeys, check_write
from oma.store.names import REDIS_NAMESPACE
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
_WATCHED_READ_TRIES = 3  # journal reads raced by a write before the read script is used
_FIRST_WAIT = 0.05  # seconds before the first retry, doubled at each next one (up to 1 s)
# Refusals redis-py has no class for that pass by themselves: a script running past its time
# limit, too few replicas in sync for min-replicas-to-write.
_PASSING_REFUSALS = ("BUSY ", "NOREPLICAS ")


class RedisStore:
    """Store in Redis under ``namespace`` (several stores can share one database).

    ``target`` is a ``redis://`` / ``rediss://`` URL (user, password, db, TLS options as query
    parameters, e.g. ``?ssl_ca_certs=/ca.pem``) or an existing ``redis.asyncio.Redis``. A client
    passed in stays the caller's: ``aclose()`` closes only a client this store created.
    """

    capabilities = StoreCapabilities(
        compare_and_set=True, expiry=True, journal=True, value_size=True
    )

    def __init__(
        self,
        target: str | aioredis.Redis,
        *,
        namespace: str = "oma",
        connect_timeout: float = 5.0,
        timeout: float = 30.0,
        retry_for: float = 10.0,
        **client_options: Any,
    ) -> None:
        if not re.fullmatch(REDIS_NAMESPACE, namespace):
            raise StoreConfigError(f"namespace must be non-empty without braces, got {namespace!r}")
        self.namespace = namespace
        self._retry_for = retry_for
        self._worked = False  # until the server answered once, a failure is not an outage
        if isinstance(target, str):
            self._secrets: tuple[str | None, ...] = _url_secrets(target)
            self._where = redact_url(target)
            target = encode_password(target)
            # No driver-level retry: a re-sent script after a lost reply would run twice, and a
            # compare_and_set that won would report False. Idempotent calls retry below instead.
            options: dict[str, Any] = {
                "socket_connect_timeout": connect_timeout,
                "socket_timeout": timeout,
                "retry": Retry(NoBackoff(), 0),
                **client_options,
                "decode_responses": False,
            }
            self._client = aioredis.Redis.from_url(target, **options)
            self._owns_client = True
        else:
            kwargs = target.connection_pool.connection_kwargs
            self._secrets = (kwargs.get("password"),)
            self._where = f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
            self._client = target
            self._owns_client = False
        self._keys = [f"{{{namespace}}}:{field}" for field in redis_scripts.FIELDS]
        self._script_keys = self._keys[:1]  # a script derives the others (redis_scripts)
        self._digests = DigestMemo()
        self._multi_write: bool | None = None  # set writes its value beside the script (7+)
        self._write = self._client.register_script(redis_scripts.WRITE)
        self._delete = self._client.register_script(redis_scripts.DELETE)
        self._read = self._client.register_script(redis_scripts.READ)
        self._journal_write = self._client.register_script(redis_scripts.JOURNAL_WRITE)
        self._journal_read = self._client.register_script(redis_scripts.JOURNAL_READ)
        self._journal_head = self._client.register_script(redis_scripts.JOURNAL_HEAD)

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, namespace={self.namespace!r})"

    def in_namespace(self, namespace: str) -> RedisStore:
        """The same server and client (one connection pool), another key namespace: the new
        store does not own the client, so closing it leaves this one working."""
        other = RedisStore(self._client, namespace=namespace, retry_for=self._retry_for)
        other._secrets, other._where = self._secrets, self._where
        other._multi_write = self._multi_write
        return other

    async def get(self, key: str) -> MemoryEntry | None:
        # One MULTI of plain reads, not the READ script: a value handed to or from a Lua
        # script is copied through the interpreter (a 1 MB value took 3.2 ms that way, 1.5 ms
        # this way, about a plain GET). MULTI keeps the fields of one write together.
        field = _encode(key)
        values, metadata, created, expiry = (
            self._keys[0],
            self._keys[2],
            self._keys[3],
            self._keys[4],
        )

        async def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            for hash_key in (values, metadata, created, expiry):
                pipe.hget(hash_key, field)
            found: list[Any] = await pipe.execute()
            return found

        value, meta, made, expires = await self._idempotent(read)
        if value is None:
            return None
        return redis_rows.entries([field, value, meta, made, expires], self._label, self._keys)[0]

    async def value_size(self, key: str) -> int | None:
        field = _encode(key)

        async def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.hexists(self._keys[0], field)
            pipe.hstrlen(self._keys[0], field)
            found: list[Any] = await pipe.execute()
            return found

        exists, size = await self._idempotent(read)
        return int(size) if exists else None

    async def list(self) -> Entries:
        rows = await self._idempotent(lambda: self._read(self._script_keys, []))
        return redis_rows.entries(rows, self._label, self._keys)

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self._put(key, value, metadata, None)

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        await self._put(key, value, metadata, expires_at_turn)

    async def _put(
        self, key: str, value: str, metadata: Metadata | None, expires_at_turn: int | None
    ) -> None:
        # One MULTI: an HSET of the value, then the write script for the other fields. Kept
        # out of the script, the value is not copied through its interpreter (at 100 KB that
        # copy cost about what the whole SET does; at 1 MB four times as much). The script is
        # sent whole (EVAL): an EVALSHA refused inside EXEC would leave the value written
        # without its digest. A swap stays one script: its compare decides whether to write.
        # Only on Redis 7+: 6.2 checks memory for a script inside EXEC against a flag left by
        # the last script sent directly, so under maxmemory the HSET could land and the
        # script be refused: the value without its digest. There the value goes through it.
        if not await self._beside_scripts():
            args = _write_args(key, value, metadata, expires_at_turn, "s", "")
            await self._idempotent(lambda: self._write(self._script_keys, args))
            self._wrote(key, value, args)
            return
        args = _write_args(key, value, metadata, expires_at_turn, "w", "")
        value_field, args[1] = args[1], b""

        async def write() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(self._keys[0], args[0], value_field)
            pipe.eval(redis_scripts.WRITE, 1, *self._script_keys, *args)
            await pipe.execute()

        await self._idempotent(write)
        self._wrote(key, value, args)

    async def _beside_scripts(self) -> bool:
        """Whether values may be written beside their script (``_put``): the server is Redis 7
        or newer (or a fork that says so). Asked once; a server that will not say is 6.2."""
        if self._multi_write is None:
            try:
                info = await self._idempotent(lambda: self._client.info("server"))
            except StoreUnavailableError:
                raise
            except StoreError:  # e.g. an ACL without INFO: the older way works everywhere
                info = {}
            self._multi_write = major_version(info.get("redis_version")) >= 7
        return self._multi_write

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: Metadata | None = None
    ) -> bool:
        if expected is None:
            args = _write_args(key, value, metadata, None, "a", "")
        else:
            # A fenced save's expected value is its previous save: its digest is known.
            expected_digest = self._digests.digest(key, expected).hex()
            args = _write_args(key, value, metadata, None, "c", expected_digest)
        try:
            reply = await self._translate(self._write(self._script_keys, args))
            swapped = self._verdict(reply, "compare_and_set")
        except StoreUnavailableError:
            if not self._worked:
                raise
            # Not simply re-sent: if the reply was lost the swap may have happened, and a
            # second run would report False to the writer that won. The key itself tells.
            swapped = await self._settle_swap(key, expected, value, args)
        if swapped:
            self._wrote(key, value, args)
        return swapped

    async def delete(self, key: str) -> None:
        await self._idempotent(lambda: self._delete(self._script_keys, [_encode(key)]))
        self._digests.forget(key)

    async def clear(self) -> None:
        # One UNLINK of every key of the namespace: a single command, hence atomic.
        await self._idempotent(lambda: self._client.unlink(*self._keys))
        self._digests.forget()

    def _wrote(self, key: str, value: str, args: Sequence[bytes | str]) -> None:
        digest = args[2]
        assert isinstance(digest, str)
        self._digests.record(key, value, bytes.fromhex(digest))

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        rows = await self._idempotent(lambda: self._journal_rows(key, history))
        if not rows:
            return None
        version, metadata, created, first, *records = rows
        where = f"{self._label}, journal"
        if not isinstance(first, int) or not records:  # every write leaves the base record
            raise redis_rows.corrupt(where, key, self._damaged_numbers(first))
        texts = []
        for index, record in enumerate(records, start=int(first)):
            if record is None:
                problem = f"record {index} of the {len(records)} its numbers name is missing"
                raise redis_rows.corrupt(where, key, f"{problem} ({self._keys[9]})")
            texts.append(redis_rows.text(record, where, key, f"record {index}"))
        return JournalEntry(
            key=key,
            records=texts,
            version=redis_rows.text(version, where, key, "its version"),
            metadata=redis_rows.metadata(metadata, where, key, f"its metadata ({self._keys[10]})"),
            created_at=redis_rows.created(created, where, key, self._keys[11]),
            start=int(first),
        )

    async def _journal_rows(self, key: str, history: bool) -> Sequence[Any]:
        """Version, metadata, creation time, the first record's number (``None``: the numbers
        are damaged) and records (``[]``: no journal), read with plain commands under
        ``WATCH`` of the versions: records handed back through a Lua script are copied by its
        interpreter (the cost of a restore's read, twice over for a 1 MB base). Any journal
        write in the namespace between the watch and the read makes the read start over; after
        a few such races the read script answers instead (atomic, only slower)."""
        field = _encode(key)
        versions, records, meta, created = (self._keys[i] for i in (7, 9, 10, 11))
        async with self._client.pipeline(transaction=True) as pipe:
            for _ in range(_WATCHED_READ_TRIES):
                try:
                    await pipe.watch(versions)
                    # immediate: the pipe watches; the numbers are small, so a script is cheap
                    span = await pipe.eval(redis_scripts.JOURNAL_SPAN, 1, *self._script_keys, field)
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                    pipe.hget(versions, field)
                    pipe.hget(meta, field)
                    pipe.hget(created, field)
                    first, end = _span(span, history)
                    names = [str(i).encode() + b":" + field for i in range(first or 0, end)]
                    if names:
                        pipe.hmget(records, names)
                    found = await pipe.execute()
                except WatchError:
                    continue
                if found[0] is None:
                    return []
                return [*found[:3], span if first is None else first, *(found[3] if names else [])]
        rows: Sequence[Any] = await self._journal_read(
            self._script_keys, [field, "h" if history else "b"]
        )
        return rows

    def _damaged_numbers(self, raw: Any) -> str:
        """What is wrong with a journal's record count, base and start (``raw``: as read, or
        ``None`` when the read script found them damaged)."""
        names = f"{self._keys[8]}, {self._keys[12]}, {self._keys[13]}"
        shown = ""
        if isinstance(raw, list | tuple):
            shown = " " + ", ".join(damaged.excerpt(n) if n is not None else "none" for n in raw)
        return (
            f"its record count, base and start ({names}){shown} are not whole numbers with "
            f"0 <= start <= base < count <= {redis_scripts.MAX_RECORDS}"
        )

    async def journal_version(self, key: str) -> str | None:
        raw = await self._idempotent(lambda: self._client.hget(self._keys[7], _encode(key)))
        where = f"{self._label}, journal"
        return redis_rows.text(raw, where, key, "its version") if raw is not None else None

    async def journal_head(self, key: str) -> JournalHead | None:
        rows = await self._idempotent(lambda: self._journal_head(self._script_keys, [_encode(key)]))
        if not rows:
            return None
        version, metadata, created, *numbers = rows
        where = f"{self._label}, journal"
        if _span(numbers, history=True)[0] is None:  # every write leaves at least the base
            raise redis_rows.corrupt(where, key, self._damaged_numbers(numbers))
        count, base, start = (damaged.integer(n) or 0 if n is not None else 0 for n in numbers)
        return JournalHead(
            key=key,
            records=count - base,
            base=base,
            start=start,
            version=redis_rows.text(version, where, key, "its version"),
            metadata=redis_rows.metadata(metadata, where, key, f"its metadata ({self._keys[10]})"),
            created_at=redis_rows.created(created, where, key, self._keys[11]),
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
        mode = "f" if force else "r" if replace else "b" if rebase else "a"
        args: list[bytes | str] = [
            _encode(key),
            version,
            mode,
            "0" if expected is None else "1",
            expected or "",
            jsonutil.dumps(metadata) if metadata is not None else "",
            str(drop_before) if drop_before is not None else "",
            *(_encode(record) for record in records),
        ]
        if force:  # the same replacement twice is the same journal: retried like a set
            reply = await self._idempotent(lambda: self._journal_write(self._script_keys, args))
            return self._verdict(reply, "journal write")
        try:
            reply = await self._translate(self._journal_write(self._script_keys, args))
            return self._verdict(reply, "journal write")
        except StoreUnavailableError:
            if not self._worked:
                raise
            # As for compare_and_set: versions never repeat, so the journal's version tells
            # whether the lost write landed (ours), did not (still expected: send again), or
            # lost to another writer.
            async for attempt in self._retrying():
                with attempt:
                    current = await self.journal_version(key)
                    if current == version:
                        return True
                    if current != expected:
                        return False
                    write = self._journal_write(self._script_keys, args)
                    return self._verdict(await self._translate(write), "journal write")
            raise AssertionError("unreachable: tenacity reraises the last error") from None

    async def journal_keys(self) -> JournalKeys:
        raw = await self._idempotent(lambda: self._client.hkeys(self._keys[7]))
        where = f"{self._label}, journal"
        return sorted(
            redis_rows.text(key, where, key, f"its key (a field of {self._keys[7]})") for key in raw
        )

    async def ping(self) -> None:
        """Check that the server answers and accepts the credentials (typed errors if not)."""
        await self._translate(self._client.ping())

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _idempotent(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a call whose repetition is harmless, retrying on a dropped connection: three
        tries until the server answered once (a wrong URL fails fast), then for ``retry_for``
        seconds (a server restart)."""
        try:
            return await self._translate(call())  # the usual case: no retry loop to set up
        except StoreUnavailableError:
            await asyncio.sleep(_FIRST_WAIT)
        async for attempt in self._retrying(tried=1):
            with attempt:
                return await self._translate(call())
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _settle_swap(
        self, key: str, expected: str | None, value: str, args: Sequence[Any]
    ) -> bool:
        """After a compare_and_set whose reply was lost: done if the key holds our value, lost
        if it holds neither value, else (not applied) sent again."""
        async for attempt in self._retrying():
            with attempt:
                rows = await self._translate(self._read(self._script_keys, [_encode(key)]))
                entries = redis_rows.entries(rows, self._label, self._keys)
                current = entries[0].value if entries else None
                if current == value:
                    return True
                if current != expected:
                    return False
                reply = await self._translate(self._write(self._script_keys, args))
                return self._verdict(reply, "compare_and_set")
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _retrying(self, tried: int = 0) -> AsyncRetrying:
        """Retries of a call tried ``tried`` times already: three tries in all until the server
        answered once, then for ``retry_for`` seconds."""
        return AsyncRetrying(
            stop=stop_after_delay(self._retry_for)
            if self._worked
            else stop_after_attempt(3 - tried),
            wait=wait_exponential(multiplier=_FIRST_WAIT, max=1.0),
            retry=retry_if_exception_type(StoreUnavailableError),
            reraise=True,
        )

    async def _translate(self, call: Awaitable[T]) -> T:
        """Await a driver call, turning driver errors into typed store errors without secrets."""
        try:
            result = await call
        except (AuthenticationError, NoPermissionError) as exc:
            message = self._clean(exc)
            if "NOAUTH" in message or "HELLO must be called" in message:
                message = "the server requires a password and none was given."
            raise StoreAuthError(
                f"Redis at {self._where} rejected the credentials: {message} Check the "
                "username/password in the URL (or the ACL of that user)."
            ) from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(
                f"Redis at {self._where} is unreachable: {self._clean(exc)} Check that the "
                "server runs and the host, port and TLS settings are right."
            ) from None
        except (ReadOnlyError, TryAgainError, ClusterDownError) as exc:
            # The server answers but cannot take writes for now: a replica (a failover under
            # way), a cluster resharding or electing a primary. Not retried here (as before);
            # the command was refused, so it was not applied.
            raise StoreError(
                f"Redis at {self._where} cannot take the command right now "
                f"({type(exc).__name__}): {self._clean(exc)} This passes once the failover or "
                "resharding is over: run again. If it lasts, check that the URL names the "
                "primary, not a replica.",
                transient=True,
            ) from None
        except OutOfMemoryError as exc:
            raise StoreError(
                f"Redis at {self._where} is out of memory: {self._clean(exc)} Nothing was "
                "written. Give it more memory (maxmemory) or delete what is no longer needed "
                "(oma checkpoint prune); keep maxmemory-policy noeviction."
            ) from None
        except ResponseError as exc:
            message = self._clean(exc)
            if message.startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
                raise StoreAuthError(f"Redis at {self._where}: {message}") from None
            if message.startswith(_PASSING_REFUSALS):
                raise StoreError(
                    f"Redis at {self._where} cannot take the command right now: {message} "
                    "This passes by itself (a long script ends, replicas catch up): run again.",
                    transient=True,
                ) from None
            raise StoreError(
                f"Redis at {self._where} refused a command: {message} Retrying will not help: "
                "check the server's version (6.2 or newer), its log and the user's ACL."
            ) from None
        except RedisError as exc:
            raise StoreError(
                f"Redis at {self._where} failed: {self._clean(exc)} Check the server's log."
            ) from None
        self._worked = True
        return result

    def _verdict(self, reply: object, what: str) -> bool:
        """A write script's answer: 1 written, 0 compared and lost. Anything else did not come
        from our script, and a fenced writer must not take it for a win (nor for a loss)."""
        if reply == 1 or reply == 0:  # redis-py answers a script's integer with an int
            return reply == 1
        shown = damaged.excerpt(reply) if isinstance(reply, bytes | str) else repr(reply)[:60]
        raise StoreError(
            f"Redis at {self._where} answered {shown} to a {what} on namespace "
            f"{self.namespace!r}: neither 1 (written) nor 0 (not written), the only answers "
            "its script gives. Whether the write happened is unknown. Check that the URL names "
            "a Redis server (6.2 or newer) and not a proxy or another service answering in its "
            "place; read the key back before writing again."
        )

    def _clean(self, exc: BaseException) -> str:
        # redis-py prefixes a pipeline's error with the command, arguments (a value) and all.
        text = _PIPELINE_COMMAND.sub("", str(exc))
        return sentence(scrub(text or type(exc).__name__, self._secrets))

    @property
    def _label(self) -> str:
        """The store as damaged-data messages name it (password masked)."""
        return f"Redis at {self._where}, namespace {self.namespace!r}"


_PIPELINE_COMMAND = re.compile(r"^Command # \d+ \(.*\) of pipeline caused error: ", re.DOTALL)


def major_version(text: object) -> int:
    """The major number of a ``redis_version`` (0 when there is none to read)."""
    head = str(text or "").split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _url_secrets(url: str) -> tuple[str | None, ...]:
    return url_passwords(url)


def _encode(text: str) -> bytes:
    # surrogatepass: a Python str may hold lone surrogates (from JSON "\ud800"); they round-trip.
    return text.encode("utf-8", "surrogatepass")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_args(
    key: str,
    value: str,
    metadata: Metadata | None,
    expires_at_turn: int | None,
    mode: str,
    expected_digest: str,
) -> list[bytes | str]:
    raw = _encode(value)
    return [
        _encode(key),
        raw,
        _digest(raw),
        jsonutil.dumps(metadata) if metadata is not None else "",
        str(expires_at_turn) if expires_at_turn is not None else "",
        mode,
        expected_digest,
    ]


def _span(raw: Sequence[Any], history: bool) -> tuple[int | None, int]:
    """The numbers of the first record to read and of the next one to be written, from the
    raw count, base and start (``JOURNAL_SPAN``); ``(None, 0)`` when they are damaged (not
    whole numbers with 0 <= start <= base < count <= MAX_RECORDS) or absent (no journal)."""
    if len(raw) != 3 or raw[0] is None:
        return None, 0
    count, base, start = (damaged.integer(n) if n is not None else 0 for n in raw)
    if count is None or base is None or start is None:
        return None, 0
    if not 0 <= start <= base < count <= redis_scripts.MAX_RECORDS:
        return None, 0
    return (start if history else base), count
