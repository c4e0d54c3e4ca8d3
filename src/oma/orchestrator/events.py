"""Progress events: what ``on_progress`` receives."""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

EventType = Literal[
    "agent_start",
    "agent_complete",
    "task_start",
    "task_complete",
    "task_skipped",
    "task_retry",
    "approval_pending",
    "checkpoint_saved",
    "tool_call",
    "model_call",
    "budget",
    "message",
    "warning",
    "error",
]


@dataclass(frozen=True)
class OrchestratorEvent:
    """A step of a run told to ``on_progress``: what happened (``type``), to which agent and
    task, with the step's details in ``data``."""

    type: EventType
    agent: str | None = None
    task: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


# A plain function, or an async one: its calls are awaited in order, and a run returns only
# once every event it emitted was delivered (``ProgressDelivery``).
ProgressCallback = Callable[[OrchestratorEvent], Awaitable[None] | None]
P = ParamSpec("P")
R = TypeVar("R")


class ProgressDelivery:
    """Calls ``on_progress`` for each event. What an async callback returns is awaited by one
    task, event after event; ``flush`` waits until all are delivered and raises the first
    error a delivery raised (a plain callback's error is raised where the event is emitted)."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self._pending: deque[Awaitable[None]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def __call__(self, event: OrchestratorEvent) -> None:
        result = self.callback(event)
        if not inspect.isawaitable(result):
            return
        self._pending.append(result)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._deliver())

    async def _deliver(self) -> None:
        while self._pending:
            try:
                await self._pending.popleft()
            except Exception as exc:
                self._error = self._error or exc

    async def flush(self, *, raise_error: bool = True) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error


class _HasProgress(Protocol):
    on_progress: ProgressDelivery | None


S = TypeVar("S", bound=_HasProgress)


def delivers_progress(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """A run method that returns (or raises) only after its progress events were delivered."""

    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        finally:
            if self.on_progress is not None:
                # While the run itself raises, that error wins over a callback's.
                await self.on_progress.flush(raise_error=sys.exc_info()[0] is None)

    functools.update_wrapper(wrapper, method)
    return wrapper
