"""Regression tests of issue #11: a Postgres run must never hang, whatever a client left behind.

The hang of the fault harness: a resumed child finished its run and then never exited. Its
store (a psycopg_pool pool, never closed) had a background worker connecting when
``asyncio.run`` ended; psycopg_pool catches ``CancelledError`` around that connect (and logs
"error connecting in 'oma-store-...': " with an empty message), so the worker survived the
loop's cancel-all and the loop waited for it forever. ``PostgresStore`` now connects only in
the task that needs a connection, so cancellation always ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from oma.errors import StoreUnavailableError
from oma.store.postgres import PostgresStore
from oma.store.postgres_sql import MIGRATION_LOCK_KEY
from tests.engine.helpers import wait_until
from tests.servers.postgres_server import PostgresServer
from tests.stores.conftest import unique_name

ROOT = Path(__file__).resolve().parents[2]


class HoldingProxy:
    """TCP proxy to Postgres: forwards the first ``forward`` connections, holds the rest
    (accepted, never answered: a server that stopped responding)."""

    def __init__(self, port: int, forward: int = 1) -> None:
        self.target = ("127.0.0.1", port)
        self.forward = forward
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self._sockets: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        count = 0
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            count += 1
            self._sockets.append(client)
            if count > self.forward:
                self.held.append(client)
                continue
            upstream = socket.create_connection(self.target)
            self._sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._stop = True
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[HoldingProxy]:
    holding = HoldingProxy(postgres_server.port)
    yield holding
    holding.close()


def _through(server: PostgresServer, port: int) -> str:
    return server.dsn().replace(f":{server.port}/", f":{port}/")


async def test_loop_ends_while_a_connection_attempt_is_in_flight(
    postgres_server: PostgresServer, proxy: HoldingProxy
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    started = time.monotonic()
    argv = [sys.executable, "-m", "tests.faults.pg_teardown_child"]
    pipe = asyncio.subprocess.PIPE
    child = await asyncio.create_subprocess_exec(
        *argv,
        _through(postgres_server, proxy.port),
        cwd=ROOT,
        env=env,
        stdin=pipe,
        stdout=pipe,
        stderr=pipe,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    # The child's main returns when told: once its second connection is held by the proxy
    # (the attempt is in flight). If that never happens, the assertions below say so.
    with contextlib.suppress(AssertionError):
        await wait_until(
            lambda: bool(proxy.held) or child.returncode is not None,
            "the proxy to hold the child's second connection",
            limit=20,
        )
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it ended already
        child.stdin.write(b"return\n")
        await child.stdin.drain()
    child.stdin.close()
    try:
        await asyncio.wait_for(child.wait(), max(0.0, started + 30 - time.monotonic()))
    except TimeoutError:
        child.kill()
        await child.wait()
        hung = (await child.stdout.read()).decode()
        pytest.fail(f"asyncio.run never returned (the issue #11 hang): {hung!r}")
    stdout = (await child.stdout.read()).decode()
    output = stdout + (await child.stderr.read()).decode()
    assert proxy.held, f"the second connection never reached the proxy:\n{output}"
    assert "returning with a connection attempt in flight" in stdout, output
    assert child.returncode == 0 and "loop shut down" in stdout, output
    assert time.monotonic() - started < 30


async def test_an_unanswered_connection_is_a_typed_error_in_bounded_time(
    postgres_server: PostgresServer, proxy: HoldingProxy
) -> None:
    proxy.forward = 0
    store = PostgresStore(_through(postgres_server, proxy.port), connect_timeout=1)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=r"unreachable|no answer"):
        await store.get("k")
    await store.aclose()
    assert time.monotonic() - started < 15


async def test_a_session_holding_the_migration_lock_is_a_typed_error_in_bounded_time(
    postgres_server: PostgresServer,
) -> None:
    # What a client on a partitioned node leaves: a live session, mid-migration, holding the
    # advisory lock (a SIGKILLed client's session ends at once: the kernel closes its socket).
    with psycopg.connect(postgres_server.dsn()) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        store = PostgresStore(
            postgres_server.dsn(), schema=unique_name("locked"), command_timeout=1, retry_for=1
        )
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="no answer within 1"):
            await store.open()
        await store.aclose()
        assert time.monotonic() - started < 15
        holder.rollback()
    async with PostgresStore(postgres_server.dsn(), schema=unique_name("free")) as store:
        await store.set("k", "v")


async def test_a_killed_client_mid_migration_leaves_no_lock(
    postgres_server: PostgresServer,
) -> None:
    schema = unique_name("killed")
    code = (
        "import os, signal, psycopg, sys\n"
        "c = psycopg.connect(sys.argv[1])\n"
        f"c.execute('SELECT pg_advisory_xact_lock(%s)', ({MIGRATION_LOCK_KEY},))\n"
        f"c.execute('CREATE SCHEMA {schema}')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", code, postgres_server.dsn()], timeout=60, check=False
    )
    assert child.returncode == -9
    async with PostgresStore(postgres_server.dsn(), schema=schema, command_timeout=10) as store:
        await store.set("k", "v")
        entry = await store.get("k")
        assert entry is not None and entry.value == "v"
