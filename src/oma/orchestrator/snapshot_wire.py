"""A run's v4 snapshot as JSON, built incrementally from the wire of its unchanged parts.

Every durable boundary writes the whole snapshot (the format is the reference's). Building it
as a ``CheckpointSnapshotV4`` model and dumping that model converts every task, every completed
result and every conversation again at every boundary, which costs far more than the JSON
encoding itself. ``SnapshotEncoder`` keeps the wire form (the dict each part becomes in the
snapshot's dump) of what did not change since the previous boundary and rebuilds only the rest:

- a task's wire is kept while its fields are equal to (deep copies of) those it was built from;
- a completed task's entry is kept while its assignee and result text are equal and its
  ``AgentRunResult`` is the same object (results are replaced, never changed, once made);
- an in-flight task's wire is kept while it is the same ``InFlightTask`` object (runners make a
  new one at every boundary, and remember its wire as they build it: ``in_flight_wire``);
- everything small (identity, approvals, shared memory, message bus) is rebuilt every time.

The text is exactly what ``CheckpointSnapshotV4(...).to_json()`` gives for the same state (same
keys, order and values); ``tests/unit/test_bench_smoke.py`` checks it against the model path at
every boundary of a run. A v2 queue (plan revisions, read but never produced here) takes the
model path.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from oma import jsonutil
from oma.agent.result import AgentRunResult
from oma.checkpoint.runner_state import InFlightTask, in_flight_wire
from oma.tasks.task import Task

log = logging.getLogger(__name__)
_FREE_FORM: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_STATUS_LISTS = (
    ("pending", "pending"),
    ("inProgress", "in_progress"),
    ("completed", "completed"),
    ("failed", "failed"),
    ("blocked", "blocked"),
    ("skipped", "skipped"),
)


class EncodedSnapshot:
    """A snapshot as the JSON document it encodes to (``wire``: plain dicts and lists, never
    changed once made), its text (encoded on first use: a journal write may need only a
    delta) and the store metadata written next to it."""

    def __init__(self, wire: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.wire = wire
        self.metadata = metadata
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = jsonutil.dumps(self.wire)
        return self._text


def free_form(value: dict[str, Any]) -> dict[str, Any]:
    """A ``dict[str, Any]`` field as the snapshot's dump writes it (Python mode)."""
    dumped: dict[str, Any] = _FREE_FORM.dump_python(value, mode="python")
    return dumped


class SnapshotEncoder:
    """Wire caches of one run; every ``*_wire`` call drops entries no longer in use."""

    def __init__(self) -> None:
        self._tasks: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._results: dict[
            str, tuple[str | None, str | None, AgentRunResult | None, dict[str, Any]]
        ] = {}
        self._states: dict[int, tuple[InFlightTask, dict[str, Any]]] = {}

    def queue_wire(self, tasks: Iterable[Task], waiting: set[str]) -> dict[str, Any]:
        """A v1 queue snapshot; tasks in ``waiting`` (resumed, not yet dispatched) are written
        in progress, as they were saved."""
        cache: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        wires: list[dict[str, Any]] = []
        by_status: dict[str, list[str]] = {status: [] for _, status in _STATUS_LISTS}
        resumed: list[str] = []
        for task in tasks:
            fingerprint = tuple(vars(task).values())
            cached = self._tasks.get(task.id)
            if cached is not None and cached[0] == fingerprint:
                entry = cached
            else:  # deep-copied: a list or dict changed in place must not match later
                entry = (copy.deepcopy(fingerprint), task.to_snapshot().to_data())
            cache[task.id] = entry
            wire = entry[1]
            if task.id in waiting:  # pending now, but saved (and so written) in progress
                wire = {**wire, "status": "in_progress"}
                resumed.append(task.id)
            else:
                by_status[task.status].append(task.id)
            wires.append(wire)
        self._tasks = cache
        queue: dict[str, Any] = {"version": 1, "tasks": wires}
        for key, status in _STATUS_LISTS:
            queue[key] = by_status[status]
        queue["inProgress"] = [*queue["inProgress"], *resumed]
        return queue

    def completed_wire(self, completed: Iterable[tuple[Task, AgentRunResult | None]]) -> list[Any]:
        cache: dict[str, tuple[str | None, str | None, AgentRunResult | None, dict[str, Any]]] = {}
        wires: list[dict[str, Any]] = []
        for task, result in completed:
            cached = self._results.get(task.id)
            if (
                cached is None
                or cached[2] is not result
                or cached[0] != task.assignee
                or cached[1] != task.result
            ):
                wire: dict[str, Any] = {"taskId": task.id}
                if task.assignee is not None:
                    wire["assignee"] = task.assignee
                if task.result is not None:
                    wire["result"] = task.result
                agent_result = agent_result_wire(task.id, result) if result else None
                if agent_result is not None:
                    wire["agentResult"] = agent_result
                cached = (task.assignee, task.result, result, wire)
            cache[task.id] = cached
            wires.append(cached[3])
        self._results = cache
        return wires

    def in_flight_wire(self, states: Iterable[InFlightTask]) -> list[dict[str, Any]]:
        cache: dict[int, tuple[InFlightTask, dict[str, Any]]] = {}
        wires: list[dict[str, Any]] = []
        for state in states:
            cached = self._states.get(id(state))
            if cached is None or cached[0] is not state:
                cached = (state, in_flight_wire(state))
            cache[id(state)] = cached
            wires.append(cached[1])
        self._states = cache
        return wires


def agent_result_wire(task_id: str, result: AgentRunResult) -> dict[str, Any] | None:
    """A completed task's result as the snapshot holds it; ``None`` when data a caller added to
    it (e.g. an object in ``structured``) is not JSON. Durability wins, as in the reference: the
    snapshot omits that one result instead of failing the save, and a restore rebuilds the
    minimal result from the task's output."""
    try:
        try:
            # JSON mode, as the model path dumps it (a datetime in ``structured`` is written
            # the same by both encoders), but for the lone surrogates in keys the reference
            # writes (a restored tool input), which only Python mode keeps (jsonutil escapes).
            wire = result.to_wire()
        except UnicodeEncodeError:
            wire = result.to_data()
        jsonutil.dumps(wire)
    except (TypeError, ValueError) as exc:  # pydantic's serialization error is a ValueError
        log.warning("task %s: its result is not JSON (%s); the checkpoint omits it", task_id, exc)
        return None
    return wire
