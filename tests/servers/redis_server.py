"""``redis-server`` as a child process: loopback only, no persistence, password required.

TLS is served on a second port with a throwaway CA, so ``rediss://`` is tested for real.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.servers.process import (
    free_port,
    listen_addresses,
    make_workdir,
    spawn,
    stop,
    wait_until,
)
from tests.servers.tls import TlsFiles, make_tls_files


def redis_binary() -> str | None:
    return shutil.which("redis-server")


@dataclass
class RedisServer:
    binary: str
    password: str = field(default_factory=lambda: "pw-" + secrets.token_urlsafe(12))
    user: str = "oma-user"  # an ACL user besides "default", to test user:password URLs
    user_password: str = field(default_factory=lambda: "upw-" + secrets.token_urlsafe(12))
    port: int = 0
    tls_port: int = 0
    workdir: Path = field(default_factory=lambda: make_workdir("oma-redis-"))
    tls: TlsFiles | None = None
    persistent: bool = False  # append-only file, fsync always: data survives a restart
    _process: subprocess.Popen[bytes] | None = None
    _argv: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def user_url(self, db: int) -> str:
        return f"redis://{self.user}:{self.user_password}@127.0.0.1:{self.port}/{db}"

    def tls_url(self, *, with_ca: bool = True) -> str:
        assert self.tls is not None
        query = f"?ssl_ca_certs={self.tls.ca_cert}" if with_ca else ""
        return f"rediss://:{self.password}@127.0.0.1:{self.tls_port}/0{query}"

    def start(self) -> Self:
        self.tls = make_tls_files(self.workdir)
        log = self.workdir / "redis.log"
        for _ in range(5):  # a free port can be taken between probing and binding it
            self.port, self.tls_port = free_port(), free_port()
            argv = [
                self.binary,
                "--port", str(self.port),
                "--bind", *listen_addresses(),
                "--dir", str(self.workdir),
                "--save", "",
                "--appendonly", "yes" if self.persistent else "no",
                "--appendfsync", "always",
                "--daemonize", "no",
                "--requirepass", self.password,
                "--user", self.user, "on", f">{self.user_password}", "~*", "&*", "+@all",
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(self.tls.server_cert),
                "--tls-key-file", str(self.tls.server_key),
                "--tls-ca-cert-file", str(self.tls.ca_cert),
                "--tls-auth-clients", "no",
            ]  # fmt: skip
            self._process = spawn(argv, log)
            try:
                wait_until(self._answers, self._process, log, "redis-server")
                self._argv = argv
                return self
            except Exception:
                if self._process.poll() is None or "Address already in use" not in log.read_text():
                    raise
        raise RuntimeError("redis-server found no free port in 5 attempts")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                reply = b""
                while b"PONG" not in reply and b"ERR" not in reply:
                    chunk = conn.recv(100)
                    if not chunk:
                        break
                    reply += chunk
                return b"PONG" in reply
        except OSError:
            return False

    def pause(self) -> None:
        """Stop the server process (clients see connection errors) until ``resume``."""
        assert self._process is not None
        stop(self._process, signal.SIGTERM)

    def resume(self) -> None:
        """Start the server again on the same ports with the same data directory."""
        log = self.workdir / "redis.log"
        self._process = spawn(self._argv, log)
        wait_until(self._answers, self._process, log, "redis-server")

    def close(self) -> None:
        if self._process is not None:
            stop(self._process, signal.SIGTERM)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
