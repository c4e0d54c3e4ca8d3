"""The operator as a child process of a test (``python -m oma_operator``), one at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import TracebackType

from tests.cluster.e2e_env import operator_env


class OperatorProcess:
    """Started on ``with`` (or ``start()``), killed outright with ``kill()`` (SIGKILL: no
    cleanup, as a crash or an OOM kill would) and started again; whatever still runs is stopped
    at the end. Every run appends to ``log``."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, *args: str, **env: str) -> None:
        self.argv = [sys.executable, "-m", "oma_operator", "--namespace", namespace, *args]
        self.env = operator_env(kubeconfig, **env)
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self._process is None, "an operator process is already running"
        with self.log.open("a") as out:
            self._process = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        assert self._process is not None, "no operator process is running"
        self._process.kill()
        self._process.wait()
        self._process = None

    def exited(self) -> int | None:
        """Its exit status once it has ended by itself (None while it runs)."""
        assert self._process is not None, "no operator process was started"
        return self._process.poll()

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM (its cleanup runs); its exit status once it has ended."""
        assert self._process is not None, "no operator process is running"
        process, self._process = self._process, None
        process.terminate()
        return process.wait(timeout=timeout)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> OperatorProcess:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
