"""Work on a TeamRun done again later (``oma_operator.later``): retries of a failed start and
the rest of a crash backoff, one pending call per run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from oma_operator.later import MAX_RETRY_SECONDS, Later

RUN = ("ns", "run")


def _started(*schedule: Callable[[], None]) -> list[asyncio.Task[Any]]:
    """The tasks that scheduling each pending call started, in order."""
    tasks: list[asyncio.Task[Any]] = []
    for step in schedule:
        before = asyncio.all_tasks()
        step()
        (task,) = asyncio.all_tasks() - before
        tasks.append(task)
    return tasks


def test_retry_delays_double_from_one_second_up_to_a_minute() -> None:
    later = Later()
    delays = [later.failed(RUN) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert max(later.failed(RUN) for _ in range(100)) == MAX_RETRY_SECONDS
    later.succeeded(RUN)
    assert later.failed(RUN) == 1.0  # a success starts the count again
    assert later.failed(("ns", "other")) == 1.0  # counted per run


async def test_a_newer_call_replaces_the_pending_one_of_the_same_run() -> None:
    later = Later()
    made: list[str] = []
    done = asyncio.Event()

    async def call(name: str) -> None:
        made.append(name)
        done.set()

    (first,) = _started(lambda: later.after(0.05, RUN, lambda: call("first"), "test"))
    later.after(0.0, RUN, lambda: call("second"), "test")
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.wait_for(asyncio.wait([first]), 5)  # the first call's task ended...
    assert first.cancelled()  # ...cancelled: it will never come
    assert made == ["second"]
    assert not later.pending(RUN)


async def test_a_call_that_fails_again_can_schedule_its_own_retry() -> None:
    later = Later()
    tries: list[int] = []
    done = asyncio.Event()

    async def attempt() -> None:
        tries.append(len(tries) + 1)
        if len(tries) < 3:
            later.after(0.0, RUN, attempt, "retry")  # from inside the pending call itself
            raise RuntimeError("the API refused")  # logged, not raised into the loop
        done.set()

    later.after(0.0, RUN, attempt, "retry")
    await asyncio.wait_for(done.wait(), 5)
    assert tries == [1, 2, 3]


async def test_cancel_and_close_drop_pending_calls() -> None:
    later = Later()
    made: list[tuple[str, str]] = []

    async def call(key: tuple[str, str]) -> None:
        made.append(key)

    other = ("ns", "other")
    calls = _started(
        lambda: later.after(0.05, RUN, lambda: call(RUN), "test"),
        lambda: later.after(0.05, other, lambda: call(other), "test"),
    )
    later.failed(RUN)
    later.cancel(RUN)  # the TeamRun was deleted
    assert not later.pending(RUN) and later.pending(other)
    assert later.failed(RUN) == 1.0  # its failures were forgotten too
    await later.close()
    await asyncio.wait_for(asyncio.wait(calls), 5)  # both tasks ended, cancelled: no call comes
    assert all(task.cancelled() for task in calls)
    assert made == [] and not later.pending(other)


async def test_a_deleted_run_does_not_cancel_the_call_of_a_new_one_of_its_name() -> None:
    """A TeamRun deleted and created again under its name: the old one's DELETED event (which
    may come after the new one's ADDED) leaves the new one's pending start alone."""
    later = Later()
    made: list[str] = []
    done = asyncio.Event()

    async def start() -> None:
        made.append("new")
        done.set()

    later.after(0.05, RUN, start, "starting the run", uid="new-uid")
    later.cancel(RUN, "old-uid")
    assert later.pending(RUN)
    await asyncio.wait_for(done.wait(), 5)
    assert made == ["new"]
    later.after(10, RUN, start, "starting the run", uid="new-uid")
    later.cancel(RUN, "new-uid")  # its own deletion does cancel it
    assert not later.pending(RUN)
    await later.close()
