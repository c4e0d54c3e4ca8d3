"""The attempt log of a run: one record per attempt, next to its latest snapshot.

A snapshot only knows the attempt that wrote it last. ``oma checkpoint show`` and operators
want the history (which attempt started when, where, and from how much finished work), so
each attempt appends one record to ``__oma_checkpoint__/<runId>/attempts`` after its first
successful save. It is an engine-only key: the snapshot format, which the TypeScript
implementation shares, is unchanged, and a run without the log restores exactly the same.
Appending is best-effort and bounded (the newest ``MAX_ATTEMPT_RECORDS`` are kept).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from oma import jsonutil
from oma.checkpoint.keys import DEFAULT_CHECKPOINT_KEY
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.errors import AttemptLogError
from oma.pod_contract import POD_NAME_ENV
from oma.store.base import MemoryStore, supports_compare_and_set
from oma.store.reserved import CHECKPOINT_KEY_PREFIX
from oma.timeutil import now_iso
from oma.wire import WireModel

MAX_ATTEMPT_RECORDS = 100
MAX_END_MESSAGE = 1024  # characters of an attempt's closing message kept in its record
_APPEND_TRIES = 5
_LATEST_SUFFIX = "/latest"


class AttemptRecord(WireModel):
    """Where an attempt started and how much of the run was already done at that moment; once
    it ended (``end_attempt``), when and how, and the tool calls it ran and replayed. An
    attempt killed outright has no end."""

    attempt: Annotated[int, Field(ge=1)]
    trace_id: str
    started_at: str
    host: str
    completed_tasks: Annotated[int, Field(ge=0)]
    total_tasks: Annotated[int, Field(ge=0)]
    in_flight_tasks: Annotated[int, Field(ge=0)]
    committed_tool_calls: Annotated[int, Field(ge=0)]
    ended_at: str | None = None
    # The run's status code ("ok", "error", "skipped", "suspended", "rejected", "cancelled": it
    # drained on a signal), or how the attempt stopped: "fenced" (a newer attempt took the run
    # over), "failed" (an error ended it).
    outcome: str | None = None
    message: str | None = None
    executed_tool_calls: Annotated[int, Field(ge=0)] | None = None
    replayed_tool_calls: Annotated[int, Field(ge=0)] | None = None


@dataclass(frozen=True)
class AttemptEnd:
    outcome: str
    message: str | None
    executed_tool_calls: int
    replayed_tool_calls: int


class ForkedFrom(WireModel):
    """The run and boundary a forked run started from (``oma.checkpoint.fork``)."""

    run_id: str
    seq: Annotated[int, Field(ge=1)]
    patch_sha256: str | None = None  # of the JSON Patch applied, as compact JSON
    at: str
    approvals_dropped: list[str] | None = None  # request ids: decisions do not cross runs


class ForkRef(WireModel):
    """A run forked from this one, at its boundary ``seq``."""

    run_id: str
    seq: Annotated[int, Field(ge=1)]
    at: str


class AttemptLog(WireModel):
    version: Literal[1]
    run_id: str
    attempts: list[AttemptRecord]
    # The run's trace id: the first logged attempt's own. Kept when that record is dropped, so
    # every attempt exports its spans into one trace (oma.tracing); absent in older logs.
    trace_id: str | None = None
    forked_from: ForkedFrom | None = None  # lineage (absent in older logs and unforked runs)
    forks: list[ForkRef] | None = None


def run_trace_id(log: AttemptLog) -> str | None:
    """The trace every attempt of the run exports into: the log's, else (a log written before
    it had one) its earliest attempt's; ``None`` for an empty log."""
    if log.trace_id:
        return log.trace_id
    earliest = min(log.attempts, key=lambda record: record.attempt, default=None)
    return earliest.trace_id if earliest is not None else None


def attempts_key(checkpoint_key: str) -> str:
    """``__oma_checkpoint__/<runId>/latest`` -> ``__oma_checkpoint__/<runId>/attempts``."""
    if checkpoint_key == DEFAULT_CHECKPOINT_KEY:
        return f"{CHECKPOINT_KEY_PREFIX}attempts"
    base = checkpoint_key.removesuffix(_LATEST_SUFFIX)
    return f"{base}/attempts"


def attempt_record(snapshot: CheckpointSnapshotV4) -> AttemptRecord:
    """The record of the attempt that wrote ``snapshot`` (its first save)."""
    tasks = snapshot.queue.tasks
    # Every call whose result the run keeps: in the turn under way (its commit), in earlier
    # turns of a task in flight (its records), and in finished tasks (their results' records).
    committed = sum(
        len(task.tool_calls)
        + sum(1 for pending in task.pending_tool_calls or [] if pending.commit is not None)
        for task in snapshot.in_flight_tasks
    )
    for done in snapshot.completed_task_results:
        calls = (done.agent_result or {}).get("toolCalls")
        committed += len(calls) if isinstance(calls, list) else 0
    return AttemptRecord(
        attempt=snapshot.identity.attempt,
        trace_id=snapshot.identity.last_trace_id,
        started_at=now_iso(),
        # The runner pod's name (downward API), else the host name: which pod ran what.
        host=os.environ.get(POD_NAME_ENV) or socket.gethostname(),
        completed_tasks=sum(1 for task in tasks if task.status == "completed"),
        total_tasks=len(tasks),
        in_flight_tasks=len(snapshot.in_flight_tasks),
        committed_tool_calls=committed,
    )


async def load_attempt_log(store: MemoryStore, checkpoint_key: str) -> AttemptLog | None:
    key = attempts_key(checkpoint_key)
    entry = await store.get(key)
    return None if entry is None else _decode(entry.value, key)


async def append_attempt(store: MemoryStore, checkpoint_key: str, record: AttemptRecord) -> None:
    """Add ``record`` (replacing an earlier record of the same attempt number)."""

    def add(log: AttemptLog) -> bool:
        log.trace_id = run_trace_id(log) or record.trace_id
        kept = [item for item in log.attempts if item.attempt != record.attempt]
        log.attempts = sorted([*kept, record], key=lambda item: item.attempt)[-MAX_ATTEMPT_RECORDS:]
        return True

    await _change_log(store, checkpoint_key, add)


async def start_fork_log(store: MemoryStore, checkpoint_key: str, lineage: ForkedFrom) -> None:
    """The attempt log of a run just forked: no attempt yet, where it came from."""

    def start(log: AttemptLog) -> bool:
        log.forked_from = lineage
        return True

    await _change_log(store, checkpoint_key, start)


async def note_fork(store: MemoryStore, checkpoint_key: str, fork: ForkRef) -> None:
    """Add a fork to the parent's log (its checkpoint itself is not written)."""

    def add(log: AttemptLog) -> bool:
        log.forks = [*(log.forks or []), fork][-MAX_ATTEMPT_RECORDS:]
        return True

    await _change_log(store, checkpoint_key, add)


async def end_attempt(
    store: MemoryStore, checkpoint_key: str, attempt: int, end: AttemptEnd
) -> bool:
    """Record how ``attempt`` ended in its record; ``False`` when the log has no record of it
    (the attempt never saved: there is no checkpoint of its own to account for)."""

    def finish(log: AttemptLog) -> bool:
        for index, record in enumerate(log.attempts):
            if record.attempt == attempt:
                message = end.message[:MAX_END_MESSAGE] if end.message else None
                log.attempts[index] = record.model_copy(
                    update={
                        "ended_at": now_iso(),
                        "outcome": end.outcome,
                        "message": message,
                        "executed_tool_calls": end.executed_tool_calls,
                        "replayed_tool_calls": end.replayed_tool_calls,
                    }
                )
                return True
        return False

    return await _change_log(store, checkpoint_key, finish, create=False)


async def _change_log(
    store: MemoryStore,
    checkpoint_key: str,
    change: Callable[[AttemptLog], bool],
    *,
    create: bool = True,
) -> bool:
    """Read, ``change`` (``False``: nothing to write) and write the log back, compared with
    what was read where the store can compare (another attempt may be appending)."""
    key = attempts_key(checkpoint_key)
    run_id = _run_id_of(checkpoint_key)
    for _ in range(_APPEND_TRIES):
        entry = await store.get(key)
        if entry is None and not create:
            return False
        log = (
            AttemptLog(version=1, run_id=run_id, attempts=[])
            if entry is None
            else _decode(entry.value, key)
        )
        if not change(log):
            return False
        value = jsonutil.dumps(log.to_wire())
        metadata = {"namespace": "checkpoint-attempts", "runId": run_id}
        if not supports_compare_and_set(store):
            await store.set(key, value, metadata)
            return True
        if await store.compare_and_set(key, entry.value if entry else None, value, metadata):
            return True
    raise RuntimeError(f"attempt log {key!r} kept changing during {_APPEND_TRIES} tries")


def _run_id_of(checkpoint_key: str) -> str:
    if checkpoint_key == DEFAULT_CHECKPOINT_KEY:
        return ""
    return checkpoint_key.removeprefix(CHECKPOINT_KEY_PREFIX).removesuffix(_LATEST_SUFFIX)


def _decode(text: str, key: str) -> AttemptLog:
    try:
        return AttemptLog.model_validate(jsonutil.loads(text))
    except (ValueError, ValidationError) as exc:
        raise AttemptLogError(key, str(exc).splitlines()[0]) from exc
