"""The fault kinds beyond SIGKILL: torn state files, a store server restarted mid-save, and two
live attempts of one run. Each reuses the harness's driver and its end-of-run checks (final
outputs, ledger and tally exactly once, no committed call re-run)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oma.store.faults import PAUSE_ENV, PAUSE_FILE_ENV
from tests.faults.harness import FENCED, KILLED, Harness, Scenario, StoreFor

# -- torn and corrupt file-store files ---------------------------------------------------------

# (name, where, how): where is "temp" (debris of a writer killed before its rename; the state
# file itself is intact) or "target" (the state file itself is damaged).
TEARS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "temp: empty": ("temp", lambda good: b""),
    "temp: cut at 1 byte": ("temp", lambda good: good[:1]),
    "temp: cut in the middle": ("temp", lambda good: good[: len(good) // 2]),
    "temp: cut 1 byte short": ("temp", lambda good: good[:-1]),
    "temp: complete, never renamed": ("temp", lambda good: good + b" "),
    "state: zero-length": ("target", lambda good: b""),
    "state: cut at 1 byte": ("target", lambda good: good[:1]),
    "state: cut in the middle": ("target", lambda good: good[: len(good) // 2]),
    "state: cut 1 byte short": ("target", lambda good: good[:-1]),
    "state: garbage appended": ("target", lambda good: good + b"\x00\xffgarbage"),
    "state: whitespace appended": ("target", lambda good: good + b"\n  \n"),
}
ADVICE = "restore the file from a backup or move it away"


@dataclass
class TearReport:
    scenarios: int = 0
    last_good_used: int = 0  # the run went on from the intact state and finished correctly
    typed_errors: int = 0  # restore refused with StoreCorruptError naming the file, file untouched
    bad_errors: int = 0  # an error that was not typed, did not name the file, or changed it
    diverged: int = 0
    committed_rerun: int = 0
    failures: list[str] = field(default_factory=list)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def run_tears(work: Path, boundaries: list[int]) -> TearReport:
    """Kill the file-store run just after write ``w`` (each of ``boundaries``), tear, resume."""
    harness = Harness(work, lambda sid: {"file": {"path": str(work / f"{sid}.json")}})
    report = TearReport()
    for write in boundaries:
        for index, (name, (where, tear)) in enumerate(TEARS.items()):
            sid = f"tear{write}x{index}"
            path = work / f"{sid}.json"
            state: dict[str, bytes] = {}

            def apply(
                sid: str,
                scenario: Scenario,
                path: Path = path,
                state: dict[str, bytes] = state,
                where: str = where,
                tear: Callable[[bytes], bytes] = tear,
            ) -> None:
                good = path.read_bytes()
                state["good"] = good
                if where == "temp":
                    path.with_name(f"{path.name}.tmp-{_dead_pid()}-1").write_bytes(tear(good))
                else:
                    state["torn"] = tear(good)
                    path.write_bytes(state["torn"])

            def repair(
                sid: str,
                scenario: Scenario,
                number: int,
                path: Path = path,
                state: dict[str, bytes] = state,
                name: str = name,
            ) -> bool:
                text = scenario.store_errors[-1]
                typed = text.startswith("StoreCorruptError") and str(path) in text
                if not typed or ADVICE not in text or path.read_bytes() != state.get("torn"):
                    report.bad_errors += 1
                    scenario.divergence.append(f"{name}: untyped or unhelpful error: {text}")
                    return False
                report.typed_errors += 1
                path.write_bytes(state["good"])  # what the operator does: the backup back
                return True

            scenario = harness.drive(
                sid, (1, write, "after"), after_kill=apply, on_store_error=repair
            )
            report.scenarios += 1
            if not scenario.store_errors and not scenario.divergence:
                report.last_good_used += 1
            report.diverged += bool(scenario.divergence)
            report.committed_rerun += scenario.committed_rerun
            if scenario.divergence or scenario.committed_rerun:
                report.failures.append(f"{sid} ({name}): {scenario}")
            leftovers = list(work.glob(f"{sid}.json.tmp-*"))
            if leftovers:
                report.diverged += 1
                report.failures.append(f"{sid} ({name}): stale temp files left: {leftovers}")
    return report


# -- a store server restarted mid-save ---------------------------------------------------------


@dataclass
class RestartReport:
    backend: str
    restarts: int = 0
    completed_by_retry: int = 0  # the saving invocation itself went on and ended normally
    typed_then_resumed: int = 0  # it exited with StoreUnavailableError; a resume finished it
    diverged: int = 0
    committed_rerun: int = 0
    failures: list[str] = field(default_factory=list)


def _wait_for(marker: Path, child: Any, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if marker.exists():
            return True
        if not child.is_alive():
            return False
        time.sleep(0.01)
    return False


def run_restarts(
    backend: str,
    work: Path,
    store_for: StoreFor,
    stop_server: Callable[[], None],
    start_server: Callable[[], None],
    points: list[tuple[int, str]],
    outage: float = 0.5,
) -> RestartReport:
    """Hold invocation 1 at each write of ``points``; stop the server; let the write go out to
    a dead server; start the server again ``outage`` seconds later."""
    harness = Harness(work, store_for)
    report = RestartReport(backend)
    for write, when in points:
        sid = f"rs{write}{when[0]}"
        marker = work / f"{sid}.pause"
        restarted: list[bool] = []

        def restart(child: Any, marker: Path = marker, restarted: list[bool] = restarted) -> None:
            if not _wait_for(marker, child):
                return
            stop_server()
            marker.unlink()
            time.sleep(outage)
            start_server()
            restarted.append(True)

        def resumed(sid: str, scenario: Scenario, number: int) -> bool:
            return scenario.store_errors[-1].startswith("StoreUnavailableError")

        scenario = harness.drive(
            sid,
            None,
            on_store_error=resumed,
            first_env={PAUSE_ENV: f"{write}:{when}", PAUSE_FILE_ENV: str(marker)},
            during_first=restart,
        )
        report.restarts += bool(restarted)
        if not restarted:
            scenario.divergence.append("the pause point was never reached")
        if scenario.store_errors and not scenario.divergence:
            report.typed_then_resumed += 1
        elif not scenario.divergence:
            report.completed_by_retry += 1
        report.diverged += bool(scenario.divergence)
        report.committed_rerun += scenario.committed_rerun
        if scenario.divergence or scenario.committed_rerun:
            report.failures.append(f"{sid}: {scenario}")
    return report


# -- two live attempts of one run ---------------------------------------------------------------


@dataclass
class TwoAttemptsReport:
    backend: str
    scenarios: int = 0
    older_fenced: int = 0  # the older attempt exited with the fenced code (12)
    fenced_executed: int = 0  # tool executions by the older attempt after the newer claimed
    fenced_reran_committed: int = 0  # ... of calls the newer attempt had committed
    diverged: int = 0
    committed_rerun: int = 0
    failures: list[str] = field(default_factory=list)


def run_two_attempts(
    backend: str, work: Path, store_for: StoreFor, kills: list[int]
) -> TwoAttemptsReport:
    """Kill invocation 1 after write ``k``; attempt A resumes and is held right after its claim;
    attempt B (loading A's claim, so one attempt number higher) runs to its end; then A goes on
    and must stop fenced without running a tool; the run then finishes normally."""
    harness = Harness(work, store_for)
    report = TwoAttemptsReport(backend)
    for write in kills:
        sid = f"two{write}"
        scenario = Scenario(kill=(1, write, "after"))
        first = harness.invoke(sid, 1, f"{write}:after", None)
        scenario.codes.append(first)
        scenario.killed = first == KILLED
        committed: set[str] = asyncio.run(harness._with_store(sid, harness._committed_calls))
        marker = work / f"{sid}.pause"
        older = harness.start(
            sid, 2, None, None, {PAUSE_ENV: "1:after", PAUSE_FILE_ENV: str(marker)}
        )
        if not _wait_for(marker, older):
            scenario.divergence.append(f"attempt A never claimed (exit {harness.finish(older)})")
        else:
            newer = harness.invoke(sid, 3, None, None)
            scenario.codes.append(newer)
            scenario.committed_rerun += harness._reruns(sid, 3, committed)
            marker.unlink()
            code = harness.finish(older)
            scenario.codes.append(code)
            report.older_fenced += code == FENCED
            if code != FENCED:
                scenario.divergence.append(
                    f"older attempt exited {code}, not fenced: {harness.error_text(sid, 2)[-300:]}"
                )
            report.fenced_executed += harness.executed(sid, 2)
            after_newer = asyncio.run(harness._with_store(sid, harness._committed_calls))
            report.fenced_reran_committed += harness._reruns(sid, 2, after_newer)
            if newer == 10:
                scenario.uncertain += asyncio.run(harness._with_store(sid, harness._decide))
                committed = asyncio.run(harness._with_store(sid, harness._committed_calls))
                harness.resume(sid, scenario, 4, committed)
            elif newer != 0:
                scenario.divergence.append(f"newer attempt exited {newer}")
        harness._check_final(sid, scenario)
        report.scenarios += 1
        report.diverged += bool(scenario.divergence)
        report.committed_rerun += scenario.committed_rerun
        if scenario.divergence or scenario.committed_rerun:
            report.failures.append(f"{sid}: {scenario}")
    return report


def markdown(columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
