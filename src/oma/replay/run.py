"""``replay_run``: a recorded run's spec run again by the current code, answered from its history.

The replay runs under the recorded run's id (so its task ids and idempotency keys are the
same), into a store of its own in memory with a history, then its boundaries are compared with
the recorded ones in order. A boundary where the recorded run began an attempt (a claim: the
same state, saved again by the next attempt) has no counterpart in a replay, which is one
attempt: it is skipped. Approval gates are not replayed: the replay runs without them, so a
recorded run that waited for a decision diverges where it first asked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oma import jsonutil
from oma.checkpoint import chain, delta
from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.history import History, load_history
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.retention import HistoryPolicy
from oma.errors import OmaError
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.orchestrator.events import OrchestratorEvent
from oma.replay.compare import Divergence, first_difference, volatile
from oma.replay.recording import Recording
from oma.replay.stand_ins import RecordedModel, recorded_tool
from oma.spec import RunSpec
from oma.store.base import MemoryStore
from oma.store.memory import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools.define import AnyTool


class ReplayError(OmaError):
    """A replay that cannot be made: no such run, a history that does not start at the run's
    first boundary, a mode it does not replay. Nothing was run."""

    code = "REPLAY_REFUSED"
    transient = False


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found: the boundaries compared, the first divergence (``None``: it
    reproduces), how long it took, and how the replayed run ended."""

    run_id: str
    boundaries: int  # recorded boundaries compared
    replayed: int  # boundaries the replay saved
    divergence: Divergence | None
    seconds: float
    outcome: str = ""  # how the replayed run ended: its status code and message

    @property
    def reproduces(self) -> bool:
        return self.divergence is None


async def replay_run(
    spec: RunSpec, store: MemoryStore, run_id: str, *, tools: Mapping[str, AnyTool] | None = None
) -> ReplayReport:
    """Run ``spec`` again against the history of ``run_id`` in ``store`` (read, never written);
    ``tools``: the tools the spec's agents name (default: the built-in ones)."""
    started = time.monotonic()
    if spec.mode != "tasks" or spec.tasks is None:
        raise ReplayError(
            f"replay runs mode tasks only; this spec is mode {spec.mode} (its coordinator's "
            "planning turns are not in the checkpoint's history)"
        )
    recorded = await load_history(store, checkpoint_key(run_id))
    if recorded is None:
        raise ReplayError(f'no checkpoint for run "{run_id}"')
    if recorded.entry.start != 0 or not recorded.records or recorded.records[0].seq != 1:
        raise ReplayError(
            f'run "{run_id}" keeps its history from boundary {recorded.records[0].seq} on: a '
            "replay needs it from the run's start (its retention dropped the rest)"
        )
    log = await load_attempt_log(store, checkpoint_key(run_id))
    if log is not None and log.forked_from is not None:
        raise ReplayError(
            f'run "{run_id}" is a fork of "{log.forked_from.run_id}" at boundary '
            f"{log.forked_from.seq}: its first boundary is that state, not a start; replay "
            "the parent"
        )
    try:
        recording = Recording.of(recorded)
        team = _team(spec, recording, run_id, tools)
    except Exception as exc:  # the store's content, not the code: refused, with what it was
        raise _unreadable(run_id, exc) from None
    replay_store = InMemoryStore()
    options = CheckpointOptions(
        store=replay_store, run_id=run_id, fence=True, journal=True, history=HistoryPolicy()
    )
    errors: list[str] = []

    def see(event: OrchestratorEvent) -> None:
        if event.type == "error" and event.data.get("error") is not None:
            errors.append(str(event.data["error"]))

    orchestrator = OpenMultiAgent(
        on_progress=see,
        max_concurrency=spec.max_concurrency,
        budget=spec.budget.run_budget() if spec.budget is not None else None,
    )
    result = await orchestrator.run_tasks(team, spec.tasks, checkpoint=options)
    outcome = result.status.code + (f": {result.status.message}" if result.status.message else "")
    if errors:  # why, e.g. a turn the recording does not hold
        outcome += f" ({errors[0]})"
    replayed = await load_history(replay_store, checkpoint_key(run_id))
    if replayed is None:  # it stopped before its first boundary
        nothing = Divergence(1, "/", "a boundary", f"(no boundary saved; the run ended {outcome})")
        return ReplayReport(run_id, 1, 0, nothing, time.monotonic() - started, outcome)
    try:
        divergence, compared, count = _compare(recorded, replayed)
    except Exception as exc:
        raise _unreadable(run_id, exc) from None
    seconds = time.monotonic() - started
    return ReplayReport(run_id, compared, count, divergence, seconds, outcome)


def _unreadable(run_id: str, error: Exception) -> OmaError:
    if isinstance(error, OmaError):
        return error
    return ReplayError(f'the recording of run "{run_id}" is not readable: {error!r}'[:2000])


def _team(
    spec: RunSpec, recording: Recording, run_id: str, tools: Mapping[str, AnyTool] | None
) -> Team:
    if tools is None:
        from oma.tools.builtin import builtin_tools

        tools = builtin_tools()
    called = {(agent, _called_tool(commit)) for (agent, _), commit in recording.commits.items()}
    agents = []
    for agent in spec.agents:
        own = [recorded_tool(recording, tools.get(name), name) for name in agent.tools]
        # The tools of its MCP servers: known by the names its recorded calls used (no server
        # is reached, so their descriptions are not).
        extra = sorted({name for who, name in called if who == agent.name} - set(agent.tools))
        own += [recorded_tool(recording, None, name) for name in extra]
        agents.append(
            AgentConfig(
                name=agent.name,
                adapter=RecordedModel(recording, agent.name),
                model=agent.model.name,
                system_prompt=agent.system_prompt,
                tools=own,
                max_turns=agent.max_turns,
                max_tokens=agent.model.max_tokens,
            )
        )
    return Team(name=run_id, agents=agents)


def _called_tool(commit: dict[str, Any]) -> str:
    return str((commit.get("record") or {}).get("toolName", ""))


def _compare(recorded: History, replayed: History) -> tuple[Divergence | None, int, int]:
    """The first divergence, the recorded boundaries compared, the replayed ones seen.

    Boundary by boundary, the records are compared first as written (a delta is small), with
    what is the clock's or the attempt's left out (``compare.VOLATILE``); only a pair that
    still differs is rebuilt whole and compared field by field (``first_difference``), which
    settles what the records alone cannot (two runs that compacted at different boundaries
    wrote a base against a delta)."""
    theirs = [g for g in _groups(recorded) if not _claim(g.what) and not g.empty()]
    ours = [g for g in _groups(replayed) if not g.empty()]
    for index, recorded_one in enumerate(theirs):
        if index >= len(ours):
            gone = Divergence(recorded_one.seq, "/", "a boundary", "(the replay ended before it)")
            return gone, index + 1, len(ours)
        mine = ours[index]
        if recorded_one.normalized() == mine.normalized():
            continue
        found = first_difference(recorded.rebuild(recorded_one.seq), replayed.rebuild(mine.seq))
        if found is not None:
            return Divergence(recorded_one.seq, *found), index + 1, len(ours)
    if len(ours) > len(theirs):
        extra = ours[len(theirs)]
        after = theirs[-1].seq if theirs else 0
        return (
            Divergence(after, "/", "(the recording ended here)", f"another boundary: {extra.what}"),
            len(theirs),
            len(ours),
        )
    return None, len(theirs), len(ours)


@dataclass(frozen=True)
class _Group:
    """A boundary's records (their bodies, headers aside)."""

    seq: int
    what: str
    bodies: tuple[str, ...]

    def empty(self) -> bool:
        """A delta that changed nothing but the clock's or the attempt's fields (a drained
        run's last save, say): nothing to compare, on either side."""
        return self.normalized() == "[[]]"

    def normalized(self) -> str:
        """The records with every path absolute and what is volatile left out (a delta's
        operations that set a volatile key, and volatile keys inside any value written), as
        JSON text: compared as text, ``1``, ``1.0`` and ``true`` differ."""
        out: list[Any] = []
        for body in self.bodies:
            parsed = jsonutil.loads(body)
            if isinstance(parsed, list):
                ops = [op for op in delta.resolved(parsed) if not _sets_volatile(op)]
                out.append(
                    [
                        [op[0], op[1], *(_without_volatile(v, _holder(op[1])) for v in op[2:])]
                        for op in ops
                    ]
                )
            else:
                out.append(_without_volatile(parsed, ""))
        return jsonutil.dumps(out)


def _holder(path: Any) -> str:
    """The key under which an operation's value sits: its path's last key (past indexes)."""
    if not isinstance(path, list):
        return ""
    keys = [step for step in path if isinstance(step, str)]
    return keys[-1] if keys else ""


def _sets_volatile(op: list[Any]) -> bool:
    path = op[1]
    if not isinstance(path, list) or not path:
        return False
    above = [step for step in path[:-1] if isinstance(step, str)]
    return volatile(above[-1] if above else "", path[-1])


def _without_volatile(value: Any, holder: str) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v, k) for k, v in value.items() if not volatile(holder, k)}
    if isinstance(value, list):
        return [_without_volatile(v, holder) for v in value]
    return value


def _claim(what: str) -> bool:
    """A boundary where a new attempt saved the state it found ("attempt N began"): a replay
    is one attempt, so it has none."""
    return what.startswith("attempt ") and what.endswith(" began")


def _groups(history: History) -> list[_Group]:
    whats = {b.seq: b.what for b in history.boundaries()}
    bodies: dict[int, list[str]] = {}
    for record in history.records:
        bodies.setdefault(record.seq, []).append(chain.split(record.text)[1])
    return [_Group(seq, whats.get(seq, ""), tuple(texts)) for seq, texts in bodies.items()]
