"""RedisStore specifics: data layout, digests on the wire, clients, TLS, errors."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, ResponseError, TryAgainError

from oma.errors import StoreError
from oma.store import RedisStore, StoreAuthError, StoreUnavailableError
from oma.store.redis import major_version
from tests.servers.fixtures import missing
from tests.servers.process import free_port
from tests.servers.redis_server import RedisServer, redis_binary
from tests.stores.conftest import unique_name


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_layout_is_one_hash_per_field_under_a_hash_tag(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    namespace = unique_name("layout")
    async with RedisStore(redis_server.url, namespace=namespace) as store:
        await store.set("a", "alpha", {"m": 1})
        await store.set_with_expiry("b", "beta", 4)
        prefix = f"{{{namespace}}}:"
        keys = sorted(
            k.decode() if isinstance(k, bytes) else k for k in await client.keys(prefix + "*")
        )
        assert keys == [
            prefix + field
            for field in ("created", "digests", "expiry", "metadata", "order", "seq", "values")
        ]
        assert await client.hget(prefix + "values", "a") == b"alpha"
        digest = hashlib.sha256(b"alpha").hexdigest().encode()
        assert await client.hget(prefix + "digests", "a") == digest
        assert await client.hget(prefix + "metadata", "a") == b'{"m":1}'
        assert await client.hget(prefix + "expiry", "b") == b"4"
        assert await client.zrange(prefix + "order", 0, -1) == [b"a", b"b"]
        await store.journal_write(
            "j", ["base"], version="v1", expected=None, replace=True, metadata={"m": 2}
        )
        journal = {
            k.decode() if isinstance(k, bytes) else k for k in await client.keys(prefix + "j*")
        }
        assert journal == {
            prefix + f for f in ("jversion", "jcount", "jrecords", "jmeta", "jcreated")
        }
        assert await client.hget(prefix + "jrecords", "0:j") == b"base"
        await store.clear()
        assert await client.keys(f"{prefix}*") == []


async def test_a_swap_from_the_value_just_written_reuses_its_digest_and_still_fences(
    redis_server: RedisServer,
) -> None:
    namespace = unique_name("memo")
    async with (
        RedisStore(redis_server.url, namespace=namespace) as ours,
        RedisStore(redis_server.url, namespace=namespace) as theirs,
    ):
        first, second = "v1" * 1000, "v2" * 1000
        assert await ours.compare_and_set("k", None, first)
        assert await ours.compare_and_set("k", first, second)  # digest of first: remembered
        await theirs.set("k", "another writer")
        assert not await ours.compare_and_set("k", second, "v3")  # stale: refused
        entry = await ours.get("k")
        assert entry is not None and entry.value == "another writer"
        await theirs.delete("k")
        await theirs.set("k", second)  # the same text again, written by someone else
        assert await ours.compare_and_set("k", second, "v4")  # equal text: a match


async def test_namespaces_are_isolated(redis_server: RedisServer) -> None:
    one = RedisStore(redis_server.url, namespace=unique_name("one"))
    two = RedisStore(redis_server.url, namespace=unique_name("two"))
    async with one, two:
        await one.set("k", "1")
        await two.set("k", "2")
        await two.clear()
        entry = await one.get("k")
        assert entry is not None and entry.value == "1"
        assert await two.list() == []


async def test_a_second_client_sees_every_write(redis_server: RedisServer) -> None:
    namespace = unique_name("shared")
    writer = RedisStore(redis_server.url, namespace=namespace)
    reader = RedisStore(redis_server.url, namespace=namespace)
    async with writer, reader:
        await writer.set("k", "v1")
        assert await reader.compare_and_set("k", "v1", "v2") is True
        entry = await writer.get("k")
        assert entry is not None and entry.value == "v2"


@contextlib.asynccontextmanager
async def _monitor(redis_server: RedisServer) -> AsyncIterator[asyncio.StreamReader]:
    """A connection in MONITOR mode: every command the server receives, a line each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", redis_server.port, limit=2**20)
    writer.write(f"AUTH {redis_server.password}\r\nMONITOR\r\n".encode())
    await writer.drain()
    try:
        assert await reader.readline() == b"+OK\r\n"
        assert await reader.readline() == b"+OK\r\n"
        yield reader
    finally:
        writer.close()
        await writer.wait_closed()


async def _monitored_until_ping(reader: asyncio.StreamReader) -> list[bytes]:
    lines: list[bytes] = []
    while not lines or b'"PING"' not in lines[-1].upper():
        lines.append(await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=10))
    return lines


async def test_compare_and_set_sends_a_digest_not_the_expected_value(
    redis_server: RedisServer,
) -> None:
    """MONITOR shows every command the server receives: the expected value is never in them."""
    marker = ("EXPECTED-" + "z" * 5000).encode()
    async with (
        _monitor(redis_server) as reader,
        RedisStore(redis_server.url, namespace=unique_name("wire")) as store,
    ):
        await store.set("k", marker.decode())
        await store.ping()
        set_commands = await _monitored_until_ping(reader)
        assert any(marker in line for line in set_commands)  # the monitor does see values
        assert await store.compare_and_set("k", marker.decode(), "new") is True
        await store.ping()
        cas_commands = await _monitored_until_ping(reader)
    digest = hashlib.sha256(marker).hexdigest().encode()
    assert any(digest in line and b"EVALSHA" in line.upper() for line in cas_commands)
    assert not any(marker in line for line in cas_commands)


async def test_a_set_sends_its_value_beside_the_script_in_one_transaction(
    redis_server: RedisServer,
) -> None:
    """A value handed to a Lua script is copied through the interpreter (costlier than the
    write itself): a set writes it with an HSET inside the script's MULTI instead."""
    marker = ("VALUE-" + "v" * 5000).encode()
    async with (
        _monitor(redis_server) as reader,
        RedisStore(redis_server.url, namespace=unique_name("wire")) as store,
    ):
        await store.set_with_expiry("k", marker.decode(), 3, {"m": 1})
        await store.ping()
        lines = await _monitored_until_ping(reader)
    # MONITOR shows a transaction's commands at EXEC, in order; script calls as "lua" lines.
    commands = [line.split(b"] ", 1)[1].split(None, 1)[0].upper() for line in lines]
    client_commands = [c for line, c in zip(lines, commands, strict=True) if b" lua] " not in line]
    start = client_commands.index(b'"MULTI"')  # after the connection's handshake
    assert client_commands[start : start + 4] == [b'"MULTI"', b'"HSET"', b'"EVAL"', b'"EXEC"']
    carrying = [line for line in lines if marker in line]
    assert len(carrying) == 1 and b'"HSET"' in carrying[0].upper()


@pytest.mark.parametrize("beside", [True, False], ids=["redis-7", "redis-6.2"])
async def test_a_value_its_digest_and_metadata_are_written_together(
    redis_server: RedisServer, client: aioredis.Redis, beside: bool
) -> None:
    """Two writers and a reader at once: every read finds one write's value, digest and
    metadata, never a mix (on Redis 7 the value is written beside the script, in the same
    MULTI; before, through the script, as a 6.2 server gets it)."""
    namespace = unique_name("together")
    prefix = f"{{{namespace}}}:"
    stop = asyncio.Event()
    reads = 0

    async def write(tag: str) -> None:
        async with RedisStore(redis_server.url, namespace=namespace) as store:
            store._multi_write = beside  # as _beside_scripts would find on such a server
            for i in range(150):
                value = f"{tag}{i}-" + tag * 3000
                if i % 2:
                    await store.set("k", value, {"of": value[:12]})
                else:
                    await store.set_with_expiry("k", value, i, {"of": value[:12]})

    async def read() -> None:
        nonlocal reads
        while not stop.is_set():
            pipe = client.pipeline(transaction=True)
            for field in ("values", "digests", "metadata", "expiry"):
                pipe.hget(prefix + field, "k")
            value, digest, metadata, expiry = await pipe.execute()
            if value is None:
                continue
            reads += 1
            assert digest == hashlib.sha256(value).hexdigest().encode()
            assert metadata == b'{"of":"' + value[:12] + b'"}'
            number = int(value.split(b"-", 1)[0][1:])
            assert (expiry is None) == bool(number % 2)

    reader = asyncio.create_task(read())
    await asyncio.gather(write("a"), write("b"))
    stop.set()
    await reader
    assert reads > 0


def test_the_server_version_decides_how_values_are_written() -> None:
    assert [major_version(v) for v in ("7.0.15", "6.2.14", "8.0.0", "", None, "x.1")] == [
        7,
        6,
        8,
        0,
        0,
        0,
    ]


async def test_a_set_on_this_server_writes_beside_the_script_and_swaps_after_either_way(
    redis_server: RedisServer,
) -> None:
    namespace = unique_name("either")
    async with RedisStore(redis_server.url, namespace=namespace) as store:
        await store.set("k", "v1")
        assert store._multi_write is True  # Debian's Redis 7: asked once, then remembered
        assert await store.compare_and_set("k", "v1", "v2")
        store._multi_write = False  # the 6.2 way, through the script
        await store.set_with_expiry("k", "v3", 5, {"m": 1})
        assert await store.compare_and_set("k", "v3", "v4")
        entry = await store.get("k")
        assert entry is not None and entry.value == "v4" and entry.expires_at_turn is None


async def test_a_refused_set_does_not_echo_the_value(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    """redis-py prefixes a pipeline's error with the command and its arguments: the value
    would reach logs, termination messages and Events."""
    namespace = unique_name("echo")
    await client.set(f"{{{namespace}}}:values", "not a hash")  # damaged: every set fails
    async with RedisStore(redis_server.url, namespace=namespace) as store:
        with pytest.raises(StoreError) as refused:
            await store.set("secret-key", "SECRET-VALUE-" + "x" * 100)
    message = str(refused.value)
    assert "WRONGTYPE" in message and "SECRET-VALUE" not in message, message
    assert "pipeline" not in message


async def test_existing_client_is_used_and_left_open(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    async with RedisStore(client, namespace=unique_name("client")) as store:
        await store.set("k", "v")
    assert await client.ping() is True


async def test_client_decoding_responses_works_too(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    store = RedisStore(client, namespace=unique_name("decoded"))
    await store.set("k", "vä", {"a": [1]})
    entry = await store.get("k")
    assert entry is not None and (entry.value, entry.metadata) == ("vä", {"a": [1]})
    assert await store.compare_and_set("k", "vä", "w") is True
    await client.aclose()


async def test_lone_surrogates_round_trip(redis_server: RedisServer) -> None:
    async with RedisStore(redis_server.url, namespace=unique_name("surrogate")) as store:
        value = "broken \ud800 pair"
        await store.set("k\udfff", value)
        entry = await store.get("k\udfff")
        assert entry is not None and entry.value == value
        assert await store.compare_and_set("k\udfff", value, "fixed") is True


async def test_acl_user_and_database_number_from_the_url(redis_server: RedisServer) -> None:
    async with RedisStore(redis_server.user_url(db=3), namespace=unique_name("acl")) as store:
        await store.set("k", "in db 3")
        check = aioredis.Redis.from_url(redis_server.url.replace("/0", "/3"))
        assert await check.hget(f"{{{store.namespace}}}:values", "k") == b"in db 3"
        await check.aclose()


def test_namespace_must_not_contain_braces(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="braces"):
        RedisStore(redis_server.url, namespace="a}b")


async def test_tls_with_the_ca_works(redis_server: RedisServer) -> None:
    async with RedisStore(redis_server.tls_url(), namespace=unique_name("tls")) as store:
        await store.set("k", "over tls")
        entry = await store.get("k")
        assert entry is not None and entry.value == "over tls"


async def test_tls_without_the_ca_is_a_typed_error(redis_server: RedisServer) -> None:
    url = redis_server.tls_url(with_ca=False)
    async with RedisStore(url, namespace=unique_name("tls")) as store:
        with pytest.raises(StoreUnavailableError, match="certificate") as caught:
            await store.get("k")
    assert redis_server.password not in str(caught.value)


async def test_closed_port_is_unavailable_with_a_clear_message() -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"
    async with RedisStore(url, connect_timeout=2) as store:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.set("k", "v")
        with pytest.raises(StoreUnavailableError):
            await store.compare_and_set("k", None, "v")
    message = str(caught.value)
    assert "unreachable" in message and "127.0.0.1" in message
    assert "hunter2-secret" not in message and "***" in message
    assert caught.value.code == "STORE_UNAVAILABLE"
    assert caught.value.transient is True


@pytest.mark.parametrize("userinfo", [":wrong-pass-123", "nobody:wrong-pass-123", ""])
async def test_bad_credentials_are_an_auth_error_without_the_password(
    redis_server: RedisServer, userinfo: str
) -> None:
    at = "@" if userinfo else ""
    url = f"redis://{userinfo}{at}127.0.0.1:{redis_server.port}/0"
    async with RedisStore(url) as store:
        with pytest.raises(StoreAuthError) as caught:
            await store.ping()
    message = str(caught.value)
    assert "wrong-pass-123" not in message and "credentials" in message
    assert caught.value.code == "STORE_AUTH_FAILED"
    assert caught.value.transient is False


async def test_a_journal_read_with_plain_commands_equals_the_read_script(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``journal_get`` reads under WATCH with plain commands; raced too often it falls back to
    the read script. Both give the same entry (records through Lua are only slower)."""
    async with RedisStore(redis_server.url, namespace=unique_name("jr")) as store:
        key = "__oma_checkpoint__/r/latest"
        base = '{"version": 4, "big": "' + "x" * 200_000 + '"}'
        assert await store.journal_write(
            key, [base], version="v1", expected=None, replace=True, metadata={"runId": "r"}
        )
        for n in range(3):
            assert await store.journal_write(
                key, [f'[["s", ["n"], {n}]]'], version=f"v{n + 2}", expected=f"v{n + 1}",
                replace=False,
            )  # fmt: skip
        plain = await store.journal_get(key)
        monkeypatch.setattr("oma.store.redis._WATCHED_READ_TRIES", 0)  # straight to the script
        scripted = await store.journal_get(key)
        assert plain is not None and plain == scripted
        assert plain.version == "v4" and len(plain.records) == 4 and plain.records[0] == base
        assert await store.journal_get("__oma_checkpoint__/none/latest") is None


async def test_journal_reads_raced_by_appends_are_each_whole(redis_server: RedisServer) -> None:
    """While a writer appends, every read is one journal as it was at some moment: its
    version is the version of its last record (never records of one version and the version
    of another)."""
    async with RedisStore(redis_server.url, namespace=unique_name("jr")) as store:
        key = "__oma_checkpoint__/r/latest"
        assert await store.journal_write(key, ["{}"], version="v0", expected=None, replace=True)
        done = asyncio.Event()

        async def append() -> None:
            for n in range(1, 200):
                record = f'[["s", ["n"], {n}]]'
                ok = await store.journal_write(
                    key, [record], version=f"v{n}", expected=f"v{n - 1}", replace=False
                )
                assert ok
            done.set()

        writer = asyncio.create_task(append())
        reads = 0
        while not done.is_set():
            entry = await store.journal_get(key)
            assert entry is not None
            last = len(entry.records) - 1
            assert entry.version == f"v{last}", (entry.version, last)
            reads += 1
        await writer
        assert reads > 0


async def test_a_replica_refusing_writes_is_a_transient_store_error() -> None:
    """A real READONLY: a server of its own turned into a replica (of nothing reachable), as a
    URL that names a replica, or a primary demoted in a failover, answers."""
    binary = redis_binary()
    if binary is None:
        missing("redis-server")  # a server of its own: the session one must stay a primary
    assert binary is not None
    with RedisServer(binary) as server:
        async with aioredis.Redis.from_url(server.url) as admin:
            await admin.replicaof("127.0.0.1", free_port())
        async with RedisStore(server.url, namespace=unique_name("ro")) as store:
            assert await store.get("k") is None  # reads still work
            with pytest.raises(StoreError) as caught:
                await store.set("k", "v")
            with pytest.raises(StoreError) as swap:
                await store.compare_and_set("k", None, "v")
    for error in (caught.value, swap.value):
        assert not isinstance(error, StoreUnavailableError)  # not retried: it was refused
        assert error.transient is True and error.code == "STORE_ERROR"
        assert "read only replica" in str(error) and "run again" in str(error)
        assert server.password not in str(error)


@pytest.mark.parametrize(
    ("refusal", "transient", "advice"),
    [
        (TryAgainError("Multiple keys request during rehashing of slot"), True, "run again"),
        (ResponseError("BUSY Redis is busy running a script."), True, "run again"),
        (ResponseError("NOREPLICAS Not enough good replicas to write."), True, "run again"),
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), False, "noev"),
        (ResponseError("ERR unknown command 'EVALSHA_RO'"), False, "will not help"),
    ],
)
async def test_refusals_say_whether_they_pass(
    refusal: Exception, transient: bool, advice: str
) -> None:
    store = RedisStore(f"redis://:secret-pw@127.0.0.1:{free_port()}/0")

    async def refused() -> None:
        raise refusal

    with pytest.raises(StoreError) as caught:
        await store._translate(refused())
    assert type(caught.value) is StoreError
    assert caught.value.transient is transient and advice in str(caught.value)
    await store.aclose()


async def test_a_journal_append_names_one_key_and_its_script_the_rest(
    redis_server: RedisServer,
) -> None:
    """Fourteen key names on every call were about 250 bytes of each boundary's append: the
    call names the namespace's first key, the script derives the others (same layout)."""
    namespace = unique_name("keys")
    async with (
        _monitor(redis_server) as reader,
        RedisStore(redis_server.url, namespace=namespace) as store,
    ):
        assert await store.journal_write("j", ["base"], version="v1", expected=None, replace=True)
        await store.ping()
        await _monitored_until_ping(reader)
        assert await store.journal_write("j", ["delta"], version="v2", expected="v1", replace=False)
        await store.ping()
        lines = await _monitored_until_ping(reader)
        entry = await store.journal_get("j")
    sent = [line for line in lines if b" lua] " not in line and b"EVALSHA" in line.upper()]
    assert len(sent) == 1
    assert f'"1" "{{{namespace}}}:values" "j"'.encode() in sent[0]
    assert f"{{{namespace}}}:j".encode() not in sent[0]  # no journal key named by the client
    derived = [line for line in lines if b" lua] " in line]
    assert any(f'"{{{namespace}}}:jrecords" "1:j" "delta"'.encode() in line for line in derived)
    assert entry is not None and entry.records == ["base", "delta"] and entry.version == "v2"


class _GarblingRedis:
    """A server speaking Redis's protocol that answers ``reply`` to every script call (and OK
    to the rest): what a proxy or an impostor in a Redis server's place could answer."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{self.port}/0"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                header = await reader.readuntil(b"\r\n")
                words = []
                for _ in range(int(header[1:-2])):
                    size = int((await reader.readuntil(b"\r\n"))[1:-2])
                    words.append((await reader.readexactly(size + 2))[:-2])
                command = words[0].upper()
                if command == b"HELLO":  # the handshake a client starts with: answered as Redis
                    writer.write(_hello(int(words[1]) if len(words) > 1 else 2))
                else:
                    scripted = command in (b"EVAL", b"EVALSHA")
                    writer.write(self.reply if scripted else b"+OK\r\n")
                await writer.drain()
        writer.close()


def _hello(protocol: int) -> bytes:
    fields = b"$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n$5\r\nproto\r\n"
    head = b"%3\r\n" if protocol == 3 else b"*6\r\n"
    return head + fields + f":{protocol}\r\n".encode()


@pytest.mark.parametrize(
    "reply", [b"+OK\r\n", b":7\r\n", b"$4\r\ntrue\r\n", b"*1\r\n:1\r\n", b"$-1\r\n"]
)
async def test_a_write_answered_with_garbage_is_refused_not_taken_for_written(
    reply: bytes,
) -> None:
    """A fenced write believes only the answers its script gives (1 written, 0 compared and
    lost): anything else was not our script, and taking it for success would let a stale
    attempt think it still owns the run."""
    async with _GarblingRedis(reply) as url:
        store = RedisStore(url, namespace="garbled", retry_for=0)
        writes = {
            "journal append": store.journal_write(
                "k", ["r"], version="v2", expected="v1", replace=False
            ),
            "journal replace": store.journal_write(
                "k", ["r"], version="v2", expected=None, replace=True
            ),
            "forced replace": store.journal_write(
                "k", ["r"], version="v2", expected=None, replace=True, force=True
            ),
            "swap": store.compare_and_set("k", "old", "new"),
            "insert": store.compare_and_set("k", None, "new"),
        }
        for what, write in writes.items():
            with pytest.raises(StoreError, match="answered") as caught:
                await write
            error = caught.value
            assert type(error) is StoreError and error.transient is False, what
            assert "neither 1 (written) nor 0" in str(error), what
        await store.aclose()
