"""Kill a real run process at every durable boundary, resume it, and compare with a clean run.

Each invocation of the run is a forked child process running ``oma.local_run.run_spec`` (what
``oma run`` and the Kubernetes runner run) with ``OMA_FAULT_KILL_AT``: the store wrapper of
``oma.store.faults`` SIGKILLs it just before or just after its n-th store write. The clean run,
with ``OMA_FAULT_LOG``, says how many writes each invocation makes; every (invocation, write,
before|after) is then a kill point. After a kill the run is resumed like an operator would, and
between invocations a reviewer decides pending approvals: gate requests are approved; an
uncertain call (a non-idempotent ``tally`` that may or may not have happened) is recorded as
done if its effect is visible in the tally and retried otherwise.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oma.approval.ledger import DurableApprovalLedger
from oma.assemble import open_store
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.errors import CheckpointFencedError, StoreError
from oma.local_run import run_spec
from oma.orchestrator.events import OrchestratorEvent
from oma.spec import RunSpec, StoreSpec
from oma.store.base import MemoryStore, close_store
from oma.store.faults import KILL_ENV, LOG_ENV, PAUSE_ENV, PAUSE_FILE_ENV
from oma.tools.builtin import LEDGER_ENV, TALLY_ENV, builtin_tools
from tests.faults.workflow import CALLS, OUTPUTS, spec

if TYPE_CHECKING:
    import pytest

    from tests.servers.postgres_server import PostgresServer
    from tests.servers.redis_server import RedisServer

KILLED = -signal.SIGKILL
FENCED = 12  # what `oma run` and the runner exit with on CheckpointFencedError
STORE_FAILED = 75  # a typed StoreError (message in <sid>.error-<n>.txt)
MAX_INVOCATIONS = 12
StoreFor = Callable[[str], dict[str, Any]]  # scenario id -> the run spec's `store`


@dataclass
class Scenario:
    """One run from start to finish, killed at most once."""

    kill: tuple[int, int, str] | None
    killed: bool = False
    codes: list[int] = field(default_factory=list)
    divergence: list[str] = field(default_factory=list)
    committed_rerun: int = 0
    ledger_twice: int = 0
    tally_twice: int = 0
    uncertain: int = 0
    writes: list[int] = field(default_factory=list)  # per invocation (clean run only)
    store_errors: list[str] = field(default_factory=list)  # typed errors a child exited with


@dataclass
class Harness:
    work: Path
    store_for: StoreFor

    # -- one invocation ---------------------------------------------------------------------
    def start(
        self,
        sid: str,
        number: int,
        fault: str | None,
        log: Path | None,
        extra: dict[str, str] | None = None,
    ) -> Any:
        env = {LEDGER_ENV: str(self._ledger(sid)), TALLY_ENV: str(self._tally(sid))}
        if fault:
            env[KILL_ENV] = fault
        if log is not None:
            env[LOG_ENV] = str(log)
        env.update(extra or {})
        events = self.work / f"{sid}.events-{number}.jsonl"
        child = _FORKS.Process(
            target=_child_main,
            args=(sid, self.store_for(sid), self.work, env, events, number),
            daemon=True,
        )
        child.start()
        return child

    @staticmethod
    def finish(child: Any) -> int:
        """The child's exit code, or -1 for a hang (reported as a divergence by the caller)."""
        child.join(timeout=120)
        if child.exitcode is None:
            child.kill()
            child.join()
            return -1
        code: int = child.exitcode
        return code

    def invoke(
        self,
        sid: str,
        number: int,
        fault: str | None,
        log: Path | None,
        extra: dict[str, str] | None = None,
    ) -> int:
        """One process run to its end (or its SIGKILL): its exit code, or -9 when killed."""
        return self.finish(self.start(sid, number, fault, log, extra))

    # -- a whole scenario -------------------------------------------------------------------
    def drive(
        self,
        sid: str,
        kill: tuple[int, int, str] | None,
        *,
        after_kill: Callable[[str, Scenario], None] | None = None,
        on_store_error: Callable[[str, Scenario, int], bool] | None = None,
        first_env: dict[str, str] | None = None,
        during_first: Callable[[Any], None] | None = None,
    ) -> Scenario:
        """Run ``sid`` to its end, killed at ``kill`` (invocation, write, when) if given.

        ``after_kill`` runs right after the SIGKILL (e.g. tears the state file);
        ``on_store_error`` decides whether an invocation that exited with a typed store error
        is resumed (``True``: its repair is done) or is a divergence. ``first_env`` and
        ``during_first`` act on invocation 1 (a pause point, and what to do while it waits).
        """
        scenario = Scenario(kill=kill)
        self.resume(
            sid, scenario, 1, set(), kill, after_kill, on_store_error, first_env, during_first
        )
        self._check_final(sid, scenario)
        return scenario

    def resume(
        self,
        sid: str,
        scenario: Scenario,
        first: int,
        committed: set[str],
        kill: tuple[int, int, str] | None = None,
        after_kill: Callable[[str, Scenario], None] | None = None,
        on_store_error: Callable[[str, Scenario, int], bool] | None = None,
        first_env: dict[str, str] | None = None,
        during_first: Callable[[Any], None] | None = None,
    ) -> None:
        """Invocations ``first``, ``first + 1``, ... until the run ends (an operator's loop)."""
        for number in range(first, MAX_INVOCATIONS + 1):
            fault = f"{kill[1]}:{kill[2]}" if kill and kill[0] == number else None
            log = self.work / f"{sid}.writes-{number}" if kill is None else None
            child = self.start(sid, number, fault, log, first_env if number == first else None)
            if during_first is not None and number == first:
                during_first(child)
            code = self.finish(child)
            scenario.codes.append(code)
            if log is not None:
                scenario.writes.append(len(log.read_text().splitlines()) if log.exists() else 0)
            if fault and code == KILLED:
                scenario.killed = True
                committed = asyncio.run(self._with_store(sid, self._committed_calls))
                if after_kill is not None:
                    after_kill(sid, scenario)
                continue
            scenario.committed_rerun += self._reruns(sid, number, committed)
            if code == STORE_FAILED:
                scenario.store_errors.append(self.error_text(sid, number))
                if on_store_error is not None and on_store_error(sid, scenario, number):
                    committed = asyncio.run(self._with_store(sid, self._committed_calls))
                    continue
            if code == 10:
                scenario.uncertain += asyncio.run(self._with_store(sid, self._decide))
                continue
            if code != 0:
                scenario.divergence.append(f"invocation {number} exited {code}")
            break
        else:
            scenario.divergence.append(f"not finished after {MAX_INVOCATIONS} invocations")

    def error_text(self, sid: str, number: int) -> str:
        path = self.work / f"{sid}.error-{number}.txt"
        return path.read_text() if path.exists() else ""

    def executed(self, sid: str, number: int) -> int:
        """Tool executions (not replays) an invocation reported."""
        path = self.work / f"{sid}.events-{number}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return sum(1 for line in lines if json.loads(line)["executed"])

    # -- checks -----------------------------------------------------------------------------
    def _reruns(self, sid: str, number: int, committed: set[str]) -> int:
        path = self.work / f"{sid}.events-{number}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return sum(
            1
            for line in lines
            if (event := json.loads(line))["executed"] and event["toolCallId"] in committed
        )

    def _check_final(self, sid: str, scenario: Scenario) -> None:
        snapshot = asyncio.run(self._with_store(sid, self._snapshot))
        if snapshot is None:
            scenario.divergence.append("no checkpoint at the end")
            return
        outputs = {task.title: task.result for task in snapshot.queue.tasks}
        if outputs != OUTPUTS or any(t.status != "completed" for t in snapshot.queue.tasks):
            scenario.divergence.append(f"outputs {outputs}")
        ledger = Counter(_keys(self._ledger(sid), "key"))
        scenario.ledger_twice = sum(1 for n in ledger.values() if n > 1)
        if {key.rsplit(":", 1)[1] for key in ledger} != {"c-1", "c-2", "p-1", "r-2"}:
            scenario.divergence.append(f"ledger entries {sorted(ledger)}")
        tally = Counter(_keys(self._tally(sid), "call"))
        scenario.tally_twice = sum(1 for n in tally.values() if n > 1)
        if {key.rsplit(":", 1)[1] for key in tally} != {"c-3", "p-2"}:
            scenario.divergence.append(f"tally entries {sorted(tally)}")

    # -- store access from the parent ----------------------------------------------------------
    async def _with_store(self, sid: str, action: Callable[[MemoryStore, str], Any]) -> Any:
        store = open_store(StoreSpec.model_validate(self.store_for(sid)), self.work / "unused")
        try:
            return await action(store, sid)
        finally:
            await close_store(store)

    async def _snapshot(self, store: MemoryStore, sid: str) -> CheckpointSnapshotV4 | None:
        snapshot = await Checkpoint(store, run_id=sid).load_latest()
        assert snapshot is None or isinstance(snapshot, CheckpointSnapshotV4)
        return snapshot

    async def _committed_calls(self, store: MemoryStore, sid: str) -> set[str]:
        snapshot = await self._snapshot(store, sid)
        if snapshot is None:
            return set()
        done = {
            call
            for task in snapshot.queue.tasks
            if task.status == "completed"
            for call in CALLS[task.title]
        }
        return done | {
            pending.call.id
            for state in snapshot.in_flight_tasks
            for pending in state.pending_tool_calls or []
            if pending.commit is not None
        }

    async def _decide(self, store: MemoryStore, sid: str) -> int:
        """Decide every undecided request as a careful reviewer would; count uncertain ones."""
        snapshot = await self._snapshot(store, sid)
        assert snapshot is not None
        ledger, uncertain = DurableApprovalLedger(store), 0
        tally = set(_keys(self._tally(sid), "call"))
        for request in snapshot.pending_approvals:
            record = await ledger.get(request.id)
            if record is not None and record.decision is not None:
                continue
            word, found = "approve", None
            if request.scope == "uncertain_tool_call":
                uncertain += 1
                key = f"{sid}:{request.content['taskId']}:{request.content['toolCallId']}"
                if key in tally:  # it happened: record it as done, do not repeat it
                    word, found = "done", f"tally holds {key}"
                else:
                    word = "retry"
            await ledger.decide(
                request_id=request.id,
                request_hash=request.request_hash,
                decision=word,
                reviewer={"id": "harness"},
                result=found,
            )
        return uncertain

    def _ledger(self, sid: str) -> Path:
        return self.work / f"{sid}.ledger.jsonl"

    def _tally(self, sid: str) -> Path:
        return self.work / f"{sid}.tally.jsonl"


# The children are forked from a clean, single-threaded fork server, not from this process:
# this one talks to the stores (threads, sockets), and forking it could deadlock a child.
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["oma.local_run", "oma.store.redis", "oma.store.postgres"])


def _child_main(
    sid: str, store: dict[str, Any], work: Path, env: dict[str, str], events: Path, number: int
) -> None:
    code = 70
    try:
        for name in (KILL_ENV, LOG_ENV, PAUSE_ENV, PAUSE_FILE_ENV):
            os.environ.pop(name, None)
        os.environ.update(env)
        code = asyncio.run(_run_once(sid, store, work, events))
    except CheckpointFencedError as exc:
        (work / f"{sid}.error-{number}.txt").write_text(f"{type(exc).__name__}: {exc}")
        code = FENCED
    except StoreError as exc:
        (work / f"{sid}.error-{number}.txt").write_text(f"{type(exc).__name__}: {exc}")
        code = STORE_FAILED
    except BaseException:
        (work / f"{sid}.error-{number}.txt").write_text(traceback.format_exc())
    finally:
        os._exit(code)


async def _run_once(sid: str, store: dict[str, Any], work: Path, events: Path) -> int:
    with events.open("a", encoding="utf-8") as sink:

        def record(event: OrchestratorEvent) -> None:
            if event.type == "tool_call":
                sink.write(json.dumps(event.data) + "\n")
                sink.flush()

        run = await run_spec(
            RunSpec.model_validate(spec(store)),
            run_id=sid,
            tools=builtin_tools(),
            default_store_path=work / f"{sid}.json",
            on_progress=record,
        )
        return run.exit_code


def _keys(path: Path, field_name: str) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)[field_name] for line in path.read_text().splitlines() if line]


@dataclass
class BackendReport:
    backend: str
    boundaries: int
    kill_points: int
    kills: int
    diverged: int
    committed_rerun: int
    ledger_twice: int
    tally_twice: int
    uncertain: int
    seconds: float
    failures: list[str]


def backend_store_for(backend: str, request: pytest.FixtureRequest, work: Path) -> StoreFor:
    """Each scenario's own store on ``backend`` (file, redis or postgres): a file in ``work``, a
    Redis namespace or a PostgreSQL table on the session's test server."""
    if backend == "file":
        return lambda sid: {"file": {"path": str(work / f"{sid}.json")}}
    if backend == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        return lambda sid: {"redis": {"url": redis.url, "namespace": f"faults-{sid}"}}
    postgres: PostgresServer = request.getfixturevalue("postgres_server")
    return lambda sid: {"postgres": {"dsn": postgres.dsn(), "table": f"faults_{sid}"}}


def run_backend(name: str, work: Path, store_for: StoreFor) -> BackendReport:
    """The clean run, then one scenario per kill point."""
    started = time.monotonic()
    harness = Harness(work, store_for)
    clean = harness.drive("clean", None)
    assert not clean.divergence and clean.codes[-1] == 0, clean
    points = [
        (number, write, when)
        for number, writes in enumerate(clean.writes, start=1)
        for write in range(1, writes + 1)
        for when in ("before", "after")
    ]
    report = BackendReport(name, sum(clean.writes), len(points), 0, 0, 0, 0, 0, 0, 0.0, [])
    for number, write, when in points:
        sid = f"k{number}w{write}{when[0]}"
        scenario = harness.drive(sid, (number, write, when))
        report.kills += scenario.killed
        report.diverged += bool(scenario.divergence)
        report.committed_rerun += scenario.committed_rerun
        report.ledger_twice += scenario.ledger_twice
        report.tally_twice += scenario.tally_twice
        report.uncertain += scenario.uncertain
        if scenario.divergence or scenario.committed_rerun:
            report.failures.append(f"{sid}: {scenario}")
    report.seconds = time.monotonic() - started
    return report


COLUMNS = (
    "backend",
    "boundaries",
    "kill points",
    "SIGKILLs",
    "diverged",
    "committed re-run",
    "ledger twice",
    "tally twice",
    "uncertain reviewed",
    "seconds",
)


def table(reports: list[BackendReport]) -> str:
    rows = [
        (
            r.backend,
            r.boundaries,
            r.kill_points,
            r.kills,
            r.diverged,
            r.committed_rerun,
            r.ledger_twice,
            r.tally_twice,
            r.uncertain,
            f"{r.seconds:.0f}",
        )
        for r in reports
    ]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the test is the entry point
    sys.exit("run: python -m pytest tests/faults -s")
