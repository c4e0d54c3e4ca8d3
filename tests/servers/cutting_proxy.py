"""A TCP proxy in front of a real server that cuts a connection at a chosen moment: the
command ran but its answer never arrives, or the command never arrived. What a store sees when
the network fails in the middle of a write."""

from __future__ import annotations

import asyncio
import contextlib


class CuttingProxy:
    """Forwards TCP to ``target_port`` on loopback.

    - ``drop_next``: the next that many chunks from the server are not passed on; their
      connection is cut instead (every command sent meanwhile ran, no answer arrives).
    - ``cut_on(marker, before=...)``: once, when a chunk from the client holds ``marker``, cut
      that connection: before forwarding the chunk (the server never sees the command) or
      after, dropping the server's next chunk (the command ran, its answer is lost); with
      ``at_once``, right after forwarding it (the command may still be running, e.g. waiting
      for a lock, when the client sees the connection gone).
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.drop_next = 0
        self.cuts = 0
        self.port = 0
        self._marker: bytes | None = None
        self._before = self._at_once = False
        self._server: asyncio.Server | None = None

    def cut_on(self, marker: bytes, *, before: bool, at_once: bool = False) -> None:
        self._marker, self._before, self._at_once = marker, before, at_once

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        drop_reply = asyncio.Event()

        async def upstream() -> None:
            while data := await client_r.read(65536):
                marked = self._marker is not None and self._marker in data
                if marked:
                    self._marker = None
                    if self._before:
                        self.cuts += 1
                        return
                    drop_reply.set()
                server_w.write(data)
                await server_w.drain()
                if marked and self._at_once:
                    self.cuts += 1
                    return
                if marked:
                    await asyncio.Event().wait()  # the reply's cut ends this connection

        async def downstream() -> None:
            while data := await server_r.read(65536):
                if self.drop_next > 0 or drop_reply.is_set():
                    self.drop_next = max(0, self.drop_next - 1)
                    self.cuts += 1
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
