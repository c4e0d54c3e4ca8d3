"""A compare_and_set whose reply is lost: RedisStore asks the key whether the swap happened
instead of re-sending it (a re-sent swap that had won would report False to its writer)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from oma.store import RedisStore
from oma.store.remote import StoreUnavailableError
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name


class ReplyDroppingProxy:
    """Forwards TCP to Redis; the next ``drop_next`` replies from the server are not passed on:
    their connection is cut instead (the command ran, its answer never arrives)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.drop_next = 0
        self.dropped = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def upstream() -> None:
            while data := await client_r.read(65536):
                server_w.write(data)
                await server_w.drain()

        async def downstream() -> None:
            while data := await server_r.read(65536):
                if self.drop_next > 0:
                    self.drop_next -= 1
                    self.dropped += 1
                    return
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
        for writer in (client_w, server_w):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[ReplyDroppingProxy]:
    proxy = ReplyDroppingProxy(redis_server.port)
    await proxy.start()
    yield proxy
    await proxy.close()


def _store(proxy: ReplyDroppingProxy, server: RedisServer, namespace: str) -> RedisStore:
    url = f"redis://:{server.password}@127.0.0.1:{proxy.port}/0"
    return RedisStore(url, namespace=namespace, retry_for=5)


async def test_a_swap_that_happened_reports_true(
    proxy: ReplyDroppingProxy, redis_server: RedisServer
) -> None:
    namespace = unique_name("lost")
    store = _store(proxy, redis_server, namespace)
    await store.set("k", "v1")  # the store has worked: an outage is now retried
    proxy.drop_next = 1
    assert await store.compare_and_set("k", "v1", "v2") is True
    direct = RedisStore(redis_server.url, namespace=namespace)
    entry = await direct.get("k")
    assert entry is not None and entry.value == "v2"
    assert proxy.dropped == 1
    await store.aclose()
    await direct.aclose()


async def test_a_swap_another_writer_won_meanwhile_reports_false(
    proxy: ReplyDroppingProxy, redis_server: RedisServer
) -> None:
    namespace = unique_name("lost")
    store = _store(proxy, redis_server, namespace)
    await store.set("k", "v1")
    assert await store.compare_and_set("k", "v1", "v2") is True
    # The reply of a swap that lost (expected v1, found v2) goes missing: still False.
    proxy.drop_next = 1
    assert await store.compare_and_set("k", "v1", "v3") is False
    assert proxy.dropped == 1
    await store.aclose()


async def test_before_the_store_ever_worked_a_lost_reply_is_a_typed_error(
    proxy: ReplyDroppingProxy, redis_server: RedisServer
) -> None:
    store = _store(proxy, redis_server, unique_name("lost"))
    proxy.drop_next = 1_000  # nothing ever answers: a wrong address looks like this
    with pytest.raises(StoreUnavailableError):
        await store.compare_and_set("k", None, "v")
    await store.aclose()
