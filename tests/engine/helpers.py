"""Shared wiring for engine tests: recording tools, event collection and test stores."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from oma.orchestrator import OrchestratorEvent
from oma.spec import RunSpec
from oma.store import FileStore
from oma.tools import AnyTool, ToolContext, define_tool
from tests.conformance_data import require_conformance_dir
from tests.engine.crashing import SimulatedCrash
from tests.plain_store import PlainStore


class LabelInput(BaseModel):
    label: str


@dataclass
class ToolLog:
    calls: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)

    def ids(self) -> list[str]:
        return [call_id for call_id, _, _ in self.calls]


def commit_effect_tool(log: ToolLog) -> AnyTool:
    """The scenario-b tool: returns ``committed:<label>`` and records every execution."""

    async def execute(args: LabelInput, ctx: ToolContext) -> str:
        log.calls.append((ctx.tool_call_id, ctx.task_id or "", {"label": args.label}))
        return f"committed:{args.label}"

    return define_tool("commit_effect", "Commit an effect.", LabelInput, execute)


@dataclass
class Events:
    items: list[OrchestratorEvent] = field(default_factory=list)

    def __call__(self, event: OrchestratorEvent) -> None:
        self.items.append(event)

    def kinds(self) -> list[str]:
        return [str(e.data.get("kind")) for e in self.items if e.type == "error"]


def copy_store_file(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copyfile(require_conformance_dir() / name, target)
    return target


class EffectInput(BaseModel):
    label: str


def effect_spec(script: list[dict[str, Any]]) -> RunSpec:
    """One agent ``w`` with the ``effect`` tool and a scripted model, one task."""
    return RunSpec.model_validate(
        {
            "mode": "tasks",
            "agents": [
                {
                    "name": "w",
                    "tools": ["effect"],
                    "model": {"provider": "scripted", "script": script},
                }
            ],
            "tasks": [{"title": "Pay", "description": "Pay.", "assignee": "w"}],
        }
    )


def effect_tool(ran: list[str], after: Any = None) -> AnyTool:
    """Records each call it runs; ``after(call_id)`` runs when it returns (a hook of the test)."""

    async def execute(args: EffectInput, ctx: ToolContext) -> str:
        ran.append(ctx.tool_call_id)
        if after is not None:
            await after(ctx.tool_call_id)
        return f"done:{args.label}"

    return define_tool("effect", "An effect.", EffectInput, execute)


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, limit: float = 10.0
) -> None:
    """Poll ``condition`` (a plain or an async function) until it holds; fail naming ``what``
    after ``limit`` seconds. For a test to wait for what it needs before its next step."""
    deadline = time.monotonic() + limit
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g}s waiting for {what}")
        await asyncio.sleep(0.005)


def die_in_e3_once_e1_e2_committed(store: Path) -> Callable[[str], Awaitable[None]]:
    """An ``effect_tool`` hook: inside call ``e3``, a simulated SIGKILL once calls ``e1`` and
    ``e2`` of the same turn are committed in the file store at ``store``."""

    async def die(call_id: str) -> None:
        if call_id != "e3":
            return
        for _ in range(500):  # until the other two calls' commits are durable
            # A tiny file read beside a running tool, as a test hook: blocking is harmless.
            text = store.read_text() if store.exists() else ""  # noqa: ASYNC240
            if '\\"tool_use_id\\":\\"e1\\"' in text and '\\"tool_use_id\\":\\"e2\\"' in text:
                raise SimulatedCrash("killed inside e3, after e1 and e2 committed")
            await asyncio.sleep(0.01)
        raise AssertionError("e1 and e2 were never committed")

    return die


# A store without compare_and_set (like RedactingStore): it cannot hold approvals.
NoCasStore = PlainStore


class RecordingStore(FileStore):
    """A FileStore that remembers the key of every write (to check write order)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[tuple[str, str]] = []

    async def set(self, key: str, value: str, metadata: dict[str, Any] | None = None) -> None:
        self.writes.append((key, value))
        await super().set(key, value, metadata)

    async def compare_and_set(
        self, key: str, expected: str | None, value: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        swapped = await super().compare_and_set(key, expected, value, metadata)
        if swapped:
            self.writes.append((key, value))
        return swapped
