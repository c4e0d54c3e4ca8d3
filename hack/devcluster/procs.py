"""Child processes that cannot outlive us.

Every child gets ``PR_SET_PDEATHSIG=SIGKILL`` (the kernel kills it when the thread that
started it dies, even if we are SIGKILLed) and its own process group; an ``atexit`` hook
kills every group still alive. Nothing is daemonized.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_live: set[ChildProcess] = set()


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # parent already gone
        os._exit(1)


class ChildProcess:
    """One child process (and its process group), logging to a file."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log_path: Path) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path
        _live.add(self)

    @classmethod
    async def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ChildProcess:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with log_path.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),
            )
        return cls(name, proc, log_path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        code = await self.proc.wait()
        _live.discard(self)
        return code

    def signal(self, sig: int) -> None:
        """Signal the main process only (like a container runtime's stop signal)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the whole process group, stragglers included."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def stop(self, grace: float = 10.0) -> int:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL the group; return the code."""
        self.signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
        except TimeoutError:
            self.kill_group()
            code = await self.proc.wait()
        self.kill_group()
        _live.discard(self)
        return code

    def tail(self, lines: int = 20) -> str:
        """The last lines of the log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@atexit.register
def kill_all() -> None:
    """Kill every child group still alive (runs at interpreter exit)."""
    for child in list(_live):
        child.kill_group()
    _live.clear()
