"""Printing, waiting, and reading the run's checkpoint as the runner left it in the store."""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from oma.checkpoint import Checkpoint, CheckpointSnapshot, CheckpointSnapshotV1
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.store import PrefixedStore, RedisStore, tenant_prefix

T = TypeVar("T")


class DemoError(Exception):
    """An expected step did not happen (exit 1)."""


class MissingTool(DemoError):
    """Something the demo needs is not installed (exit 2)."""


def say(text: str = "") -> None:
    print(text, flush=True)  # a pipe (the test) sees each step as it happens


def step(number: int, title: str) -> None:
    say(f"\n==> [{number}/8] {title}")


def shown(argv: list[str]) -> str:
    """A command line as a reader would type it (tools by name, not by cache path)."""
    return shlex.join([Path(argv[0]).name, *argv[1:]])


async def wait_until(
    probe: Callable[[], Awaitable[T | None]], limit: float, what: str, interval: float = 0.2
) -> T:
    deadline = time.monotonic() + limit
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {limit:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def read_checkpoint(url: str, run_id: str, namespace: str) -> CheckpointSnapshot | None:
    """The TeamRun's checkpoint: in its Kubernetes namespace's part of the store (the spec's
    store.redis.namespace is the default "oma")."""
    store = PrefixedStore(RedisStore(url), tenant_prefix(namespace))
    try:
        return await Checkpoint(store, run_id=run_id).load_latest()
    finally:
        await store.aclose()


@dataclass
class CheckpointView:
    """The parts of a snapshot the demo talks about."""

    version: int
    run_id: str | None
    attempt: int | None
    tasks: dict[str, str]  # title -> status
    done_calls: list[str] = field(default_factory=list)  # "name(id)" with a committed result
    open_calls: list[str] = field(default_factory=list)  # issued by the model, no result yet
    awaiting: list[str] = field(default_factory=list)  # waiting for an approval
    decisions: list[str] = field(default_factory=list)  # "approved by alice"

    def line(self) -> str:
        finished = sum(status == "completed" for status in self.tasks.values())
        parts = [
            f"schema v{self.version}",
            f"run {self.run_id} attempt {self.attempt}",
            f"tasks {finished}/{len(self.tasks)} completed",
        ]
        if self.done_calls:
            parts.append("committed tool results: " + ", ".join(self.done_calls))
        if self.open_calls:
            parts.append("in progress: " + ", ".join(self.open_calls))
        if self.awaiting:
            parts.append("awaiting approval: " + ", ".join(self.awaiting))
        if self.decisions:
            parts.append("decisions: " + ", ".join(self.decisions))
        return "; ".join(parts)


def checkpoint_view(snapshot: CheckpointSnapshot) -> CheckpointView:
    if isinstance(snapshot, CheckpointSnapshotV1):
        run_id, attempt = snapshot.run_id, None
    else:
        run_id, attempt = snapshot.identity.run_id, snapshot.identity.attempt
    view = CheckpointView(
        version=snapshot.version,
        run_id=run_id,
        attempt=attempt,
        tasks={task.title: task.status for task in snapshot.queue.tasks},
    )
    if not isinstance(snapshot, CheckpointSnapshotV4):
        return view
    for task in snapshot.in_flight_tasks:
        uses: dict[str, str] = {}
        results: set[str] = set()
        for message in task.conversation_messages:
            for block in message.get("content") or []:
                if not isinstance(block, dict):
                    continue  # plain-text content
                if block.get("type") == "tool_use":
                    uses[block["id"]] = f"{block['name']}({block['id']})"
                elif block.get("type") == "tool_result":
                    results.add(block["tool_use_id"])
        for pending in task.pending_tool_calls or []:
            call_id = pending.call.id
            if pending.commit is not None:
                results.add(call_id)
            elif pending.approval_request is not None and pending.approval_decision is None:
                view.awaiting.append(uses.pop(call_id, call_id))
        for call_id, label in uses.items():
            (view.done_calls if call_id in results else view.open_calls).append(label)
    for result in snapshot.completed_task_results:
        calls = (result.agent_result or {}).get("toolCalls") or []
        view.done_calls += [f"{call.get('toolName')}" for call in calls if isinstance(call, dict)]
    view.decisions = [
        f"{decision.scope} {decision.decision} by {decision.reviewer.id}"
        for decision in snapshot.approval_decisions
    ]
    return view


def attempt_line(record: dict[str, Any]) -> str:
    """One ``status.attempts[]`` entry, with what it said (the runner's own words)."""
    text = (
        f"attempt {record.get('attempt')}: pod {record.get('pod')} {record.get('outcome')} "
        f"({record.get('reason')}, exit {record.get('exitCode')})"
    )
    said = record.get("message")
    return f"{text}: {said}" if said else text
