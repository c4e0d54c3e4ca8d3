"""A server that accepts connections and never answers: a store that hangs every call.

It listens on the test servers' addresses (loopback, and the devcluster sandbox's host address
inside a sandbox, where real pods reach it), on one port. Stop it with ``close``.
"""

from __future__ import annotations

import asyncio

from tests.servers.process import listen_addresses


class Tarpit:
    def __init__(self) -> None:
        self.connections = 0  # accepted so far: a caller reached it
        self.port = 0
        self._held: list[asyncio.StreamWriter] = []
        self._servers: list[asyncio.Server] = []

    async def start(self) -> Tarpit:
        first, *others = listen_addresses()
        server = await asyncio.start_server(self._hold, first, 0)
        self.port = server.sockets[0].getsockname()[1]
        self._servers = [server]
        for host in others:
            self._servers.append(await asyncio.start_server(self._hold, host, self.port))
        return self

    def url(self, scheme: str = "redis") -> str:
        """A URL of it as this process reaches it (``for_pods`` turns it into the pods')."""
        return f"{scheme}://tarpit@127.0.0.1:{self.port}/0"

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._held.append(writer)
        await reader.read()  # until the caller gives up: never a byte back

    async def close(self) -> None:
        for writer in self._held:
            writer.close()
        for server in self._servers:
            server.close()
