"""docs/quickstart.md's commands as its tests run them: taken from the doc's fenced blocks (so a
change to the doc is what the tests run) and run one at a time by bash, like a user's terminal.

``Terminal`` keeps what a command exports for the next one (``export PATH=...``), runs commands
that end with ``&`` as jobs of their own (each in its own process group, as an interactive shell
does, so ``stop_jobs`` is ``kill %1``), and starts a foreground command that never returns (``up``)
in a session of its own, so ``interrupt`` is the terminal's Ctrl-C (SIGINT to its process
group). A command's output goes to files, never pipes, so a job it leaves running cannot hold
the test. ``leftovers`` finds every process that outlived a test by the test's temp directory in
its command line or environment (``HOME`` and ``TMPDIR`` point there).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "docs" / "quickstart.md"


def section(number: int) -> str:
    """The text of the quickstart's section ``## <number>. ...`` (up to the next ``## ``)."""
    text = QUICKSTART.read_text(encoding="utf-8")
    found = re.search(rf"^## {number}\. .*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert found, f"docs/quickstart.md has no section '## {number}. ...'"
    return found[0]


def fenced(text: str) -> list[tuple[str, str]]:
    """Each fenced block of ``text`` as (its language, or "", its body)."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if language is None and line.startswith("```"):
            language, body = line[3:].strip(), []
        elif language is not None and line.strip() == "```":
            blocks.append((language, "".join(f"{b}\n" for b in body)))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def bash_blocks(text: str) -> list[list[str]]:
    """Each ```bash block of ``text``, as its commands: one a line (a line ending with ``\\``
    joined to the next), comment-only lines dropped."""
    blocks = []
    for _, body in (block for block in fenced(text) if block[0] == "bash"):
        commands: list[str] = []
        pending = ""
        for line in body.splitlines():
            if pending:
                line = pending + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
        blocks.append(commands)
    return blocks


def output_blocks(text: str) -> list[str]:
    """The fenced blocks without a language: what the doc shows a command printing."""
    return [body for language, body in fenced(text) if not language]


def without_comment(command: str) -> str:
    """``command`` without its trailing ``# ...`` comment (none of the doc's commands has a
    ``#`` inside quotes)."""
    return re.sub(r"\s+#.*$", "", command)


def user_environment(home: Path, tmp: Path, *, drop_from_path: tuple[Path, ...]) -> dict[str, str]:
    """A user's environment in a fresh terminal: this one's, without what the test runner adds
    (the venv and the cluster binaries on ``PATH``, ``VIRTUAL_ENV``, ``PYTHONPATH``, the
    sandbox's and the suites' ``OMA_*`` settings, ``KUBECONFIG``), with ``HOME`` and ``TMPDIR``
    in the test's temp directory. Only ``OMA_K8S_CACHE`` stays (the binaries' cache, which
    ``HOME`` would otherwise move)."""
    from devcluster.binaries import cache_root

    dropped = {p.resolve() for p in drop_from_path}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMA_", "E2E_", "PYTEST_"))
        and key not in {"KUBECONFIG", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONUNBUFFERED"}
    }
    env["PATH"] = os.pathsep.join(p for p in path if Path(p).resolve() not in dropped)
    env["OMA_K8S_CACHE"] = str(cache_root())
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    home.mkdir(parents=True, exist_ok=True)
    return env


@dataclass(frozen=True)
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"$ {self.command}\n(exit {self.returncode})\n{self.stdout}{self.stderr}"


class Terminal:
    """One terminal of the quickstart, in ``cwd`` with ``env``; ``scratch`` holds its files."""

    def __init__(self, name: str, cwd: Path, env: dict[str, str], scratch: Path) -> None:
        self.name, self.cwd, self.env = name, cwd, dict(env)
        self.scratch = scratch / f"terminal-{name}"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.jobs: list[int] = []  # process groups of the jobs started with '&'
        self.transcript: list[str] = []
        self._count = 0

    def run(self, command: str, *, timeout: float = 180, check: bool = True) -> Ran:
        """Run one command line as the user types it; ``check``: fail unless it exits 0."""
        self._count += 1
        base = self.scratch / f"{self._count:02d}"
        env_file, job_file = base.with_suffix(".env"), base.with_suffix(".job")
        background = command.rstrip().endswith("&") and not command.rstrip().endswith("&&")
        script = "\n".join(
            [
                "set -m -o pipefail",  # -m: a job gets its own process group, as interactively
                command,
                "__rc=$?",
                f"echo $! > {job_file}" if background else "",
                f"env -0 > {env_file}",
                "exit $__rc",
            ]
        )
        out, err = base.with_suffix(".out"), base.with_suffix(".err")
        with out.open("w") as stdout, err.open("w") as stderr:
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                timeout=timeout,
                check=False,
            )
        if env_file.exists():
            pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs if k not in {"_", "SHLVL", "PWD", "OLDPWD"}}
        if background:
            self.jobs.append(int(job_file.read_text()))
        ran = Ran(command, done.returncode, out.read_text(), err.read_text())
        self.transcript.append(str(ran))
        assert not check or ran.returncode == 0, f"terminal {self.name}:\n{ran}"
        return ran

    def start(self, command: str, log: Path) -> subprocess.Popen[bytes]:
        """Start a foreground command that keeps running (the terminal stays busy with it)."""
        self.transcript.append(f"$ {command}   (left running; output in {log})")
        with log.open("w") as out:
            return subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the terminal's foreground job
            )

    @staticmethod
    def interrupt(proc: subprocess.Popen[bytes]) -> None:
        """Ctrl-C: SIGINT to the foreground command's process group."""
        os.killpg(proc.pid, signal.SIGINT)

    def stop_jobs(self, timeout: float = 30) -> None:
        """``kill %N`` for every job this terminal started: SIGTERM to each job's process
        group, then wait until the group is gone (SIGKILL after ``timeout``)."""
        for group in self.jobs:
            _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(_group_alive(g) for g in self.jobs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for group in self.jobs:
            _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def leftovers(marker: Path) -> list[str]:
    """Processes (not this one, not pytest) whose command line or environment names
    ``marker``: what the quickstart started that still runs."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            seen = cmdline + (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if str(marker).encode() in seen and b"pytest" not in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline[:200]!r}")
    return found


def wait_until_clean(marker: Path, timeout: float = 30) -> list[str]:
    """Wait up to ``timeout`` for every process naming ``marker`` to end; what is left."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
