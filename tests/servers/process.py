"""Child-process plumbing shared by the server fixtures: free ports, parent-death, stopping."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """A test server did not come up; the message carries the end of its log."""


def _owner_tag() -> str:
    """Our pid with our pid namespace: a pid means nothing in another one (a test run inside
    devcluster's sandbox and one outside share /tmp but not their pids)."""
    return f"{os.readlink('/proc/self/ns/pid')} {os.getpid()}"


def make_workdir(prefix: str) -> Path:
    """A fresh temp dir tagged with our pid; dirs of dead sessions (SIGKILLed) are swept, but
    only those of our own pid namespace, where we can tell whether their owner lives."""
    here = os.readlink("/proc/self/ns/pid")
    for stale in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        with contextlib.suppress(OSError, ValueError):
            namespace, _, pid = (stale / "owner.pid").read_text().strip().rpartition(" ")
            if namespace == here and not _alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    (workdir / "owner.pid").write_text(_owner_tag())
    return workdir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_port() -> int:
    """A loopback port that was free a moment ago (the server binding it may still race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> None:
    # Runs in the child after any setuid (which would clear the setting): if pytest is killed
    # outright, the kernel sends SIGTERM to the server, so no server outlives the session.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    argv: Sequence[str],
    log: Path,
    *,
    user: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the foreground (never daemonized), output to ``log``; ``env``: its
    whole environment (default: ours)."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            user=user,
            group=user,
            extra_groups=[] if user else None,
            preexec_fn=_die_with_parent,
        )


def run_as(argv: Sequence[str], log: Path, *, user: str | None = None) -> None:
    """Run a setup command (initdb) to completion; raise with its output if it fails."""
    process = spawn(argv, log, user=user)
    if process.wait(timeout=120) != 0:
        raise ServerStartError(f"{argv[0]} failed:\n{tail(log)}")


def wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str
) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{what} exited with {process.returncode}:\n{tail(log)}")
        if ready():
            return
        time.sleep(0.05)
    stop(process, signal.SIGTERM)
    raise ServerStartError(f"{what} did not become ready in 30s:\n{tail(log)}")


def stop(process: subprocess.Popen[bytes], first_signal: int) -> None:
    """Stop a server: polite signal, then SIGKILL; always reaped."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(first_signal)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def tail(log: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def chown_tree(path: Path, user: str) -> None:
    import pwd

    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs)]:
            os.chown(name, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def listen_addresses() -> list[str]:
    """Loopback, plus the devcluster sandbox's host address when the tests run inside one
    (``OMA_DEVCLUSTER_HOST_IP``): real pods reach the servers there."""
    extra = os.environ.get("OMA_DEVCLUSTER_HOST_IP", "")
    return ["127.0.0.1", *([extra] if extra else [])]
