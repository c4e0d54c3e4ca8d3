"""``oma.tools.mcp.counter_server`` (a real MCP server built with the SDK) as a child process on a
free loopback port (or ``host``: the test cluster's address pods reach), its side effects in the
session's Redis under a prefix of its own."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis

from tests.servers.process import free_port, make_workdir, spawn, stop, wait_until


@dataclass
class McpCounterServer:
    redis_url: str
    env: Mapping[str, str] = field(default_factory=dict)
    prefix: str = field(default_factory=lambda: "mcp-" + secrets.token_hex(4))
    port: int = 0
    host: str = "127.0.0.1"
    workdir: Path = field(default_factory=lambda: make_workdir("oma-mcp-"))
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    @property
    def child_env(self) -> dict[str, str]:
        """What the server reads (for a stdio server started by the runner instead)."""
        return {"MCP_COUNTER_REDIS_URL": self.redis_url, "MCP_COUNTER_PREFIX": self.prefix}

    def start(self, **env: str) -> Self:
        """Start (or, after ``stop``, start again on the same port) with ``env`` on top."""
        argv = [sys.executable, "-m", "oma.tools.mcp.counter_server", "--host", self.host, "--port"]
        environ = {**os.environ, **self.child_env, **self.env, **env}
        self.port = self.port or free_port()
        log = self.workdir / "mcp.log"
        self._process = spawn([*argv, str(self.port)], log, env=environ)
        wait_until(self._answers, self._process, log, "the MCP counter server")
        return self

    def stop(self) -> None:
        if self._process is not None:
            stop(self._process, signal.SIGTERM)
            self._process = None

    def _answers(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                return True
        except OSError:
            return False

    def _db(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    def calls(self) -> list[dict[str, Any]]:
        """Every call the server received, in order: tool, key, arguments."""
        with self._db() as db:
            return [json.loads(raw) for raw in db.lrange(f"{self.prefix}:calls", 0, -1)]

    def counter(self, name: str) -> int:
        with self._db() as db:
            return int(db.get(f"{self.prefix}:counter:{name}") or 0)

    def paid(self, to: str) -> int:
        with self._db() as db:
            return int(db.get(f"{self.prefix}:paid:{to}") or 0)

    def close(self) -> None:
        self.stop()
        with self._db() as db:
            keys = list(db.scan_iter(f"{self.prefix}:*"))
            if keys:
                db.delete(*keys)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
