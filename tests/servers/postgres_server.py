"""PostgreSQL 15 as a child process: a fresh cluster in a temp dir, loopback TCP, scram auth.

Postgres refuses to run as root, so under root the cluster belongs to the ``postgres`` system
user (from the Debian package) and the server runs as that user. Durability settings are off:
the cluster is thrown away after the session.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg

from tests.servers.process import (
    chown_tree,
    free_port,
    listen_addresses,
    make_workdir,
    run_as,
    spawn,
    stop,
    wait_until,
)

PG_BIN_DIRS = [Path(f"/usr/lib/postgresql/{v}/bin") for v in (17, 16, 15, 14)]


def postgres_bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    return next((d for d in PG_BIN_DIRS if (d / "initdb").exists()), None)


@dataclass
class PostgresServer:
    bin_dir: Path
    user: str = "oma"
    password: str = field(default_factory=lambda: "pw-" + secrets.token_urlsafe(12))
    port: int = 0
    workdir: Path = field(default_factory=lambda: make_workdir("oma-pg-"))
    # Commits flushed to disk (fsync, synchronous commit, full pages) as a production server
    # runs; off for the test suites, where durability against a power cut is not under test.
    durable: bool = False
    _process: subprocess.Popen[bytes] | None = None
    _argv: list[str] = field(default_factory=list)

    @property
    def run_as(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    def dsn(self, *, password: str | None = None, dbname: str = "postgres") -> str:
        secret = self.password if password is None else password
        return f"postgresql://{self.user}:{secret}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> Self:
        data, sockets, log = self.workdir / "data", self.workdir / "sock", self.workdir / "pg.log"
        sockets.mkdir()
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.run_as:
            chown_tree(self.workdir, self.run_as)
        run_as(
            [
                str(self.bin_dir / "initdb"), "-D", str(data), "-U", self.user,
                f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--locale=C",
                "--no-sync",
            ],
            log,
            user=self.run_as,
        )  # fmt: skip
        pwfile.unlink()
        if len(listen_addresses()) > 1:  # pods of the sandbox's real node connect from 10/8
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all 10.0.0.0/8 scram-sha-256\n")
        for _ in range(5):  # a free port can be taken between probing and binding it
            self.port = free_port()
            argv = [
                str(self.bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                "-h", ",".join(listen_addresses()), "-k", str(sockets),
                "-c", "max_connections=300", "-c", "shared_buffers=32MB",
            ]  # fmt: skip
            if not self.durable:
                argv += ["-c", "fsync=off", "-c", "synchronous_commit=off"]
                argv += ["-c", "full_page_writes=off"]
            self._process = spawn(argv, log, user=self.run_as)
            try:
                wait_until(self._answers, self._process, log, "postgres")
                self._argv = argv
                return self
            except Exception:
                if self._process.poll() is None or "already in use" not in log.read_text():
                    raise
        raise RuntimeError("postgres found no free port in 5 attempts")

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def pause(self) -> None:
        """Stop the server ("fast" shutdown: clients are disconnected) until ``resume``."""
        assert self._process is not None
        stop(self._process, signal.SIGINT)

    def resume(self) -> None:
        """Start the server again on the same port with the same data directory."""
        log = self.workdir / "pg.log"
        self._process = spawn(self._argv, log, user=self.run_as)
        wait_until(self._answers, self._process, log, "postgres")

    def close(self) -> None:
        if self._process is not None:
            stop(self._process, signal.SIGINT)  # SIGINT = "fast" shutdown
        with contextlib.suppress(OSError):
            shutil.rmtree(self.workdir)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
