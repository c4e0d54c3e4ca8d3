"""Writing a run journal: ``JournalRecorder`` numbers and stamps each event as it happens and
hands them, in batches, to a ``RunJournal`` (where they are kept: ``sinks``, ``store_sink``).

As the reference's ``JournalRecorder``: ``emit`` assigns ``seq`` at once, before any await, so
the order of the journal is the order things happened; a restored attempt goes on from the
highest number either the journal or the checkpoint's watermark has seen. An append that fails
loses its batch and is reported (``on_error``), never failing the run: the journal is an audit
trail beside the checkpoint, not what the run resumes from.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

FLUSH_INTERVAL_SECONDS = 0.05  # as the reference's default flushIntervalMs


@runtime_checkable
class RunJournal(Protocol):
    """Where a run's events are kept: appended in batches, read back in order."""

    async def append(self, events: Sequence[dict[str, Any]]) -> None:
        """Keep ``events`` (in order, after every event appended before): all or none."""
        ...

    async def read_from(self, seq: int, *, run_id: str) -> list[dict[str, Any]]:
        """The run's kept events numbered ``seq`` or more, in order."""
        ...

    def describe(self, run_id: str) -> dict[str, str] | None:
        """What a v5 checkpoint names as its ``journalRef`` (``{"kind", "path"?}``)."""
        ...


class JournalRecorder:
    """One attempt's writer of a run's journal (``open`` it: it continues the numbering)."""

    def __init__(
        self,
        journal: RunJournal,
        *,
        run_id: str,
        attempt: int,
        start_seq: int = 0,
        trace_id: str | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.journal = journal
        self.run_id = run_id
        self.attempt = attempt
        self.trace_id = trace_id
        self.seq = start_seq  # the last number given
        self._on_error = on_error
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        journal: RunJournal,
        *,
        run_id: str,
        attempt: int,
        floor: int = 0,
        trace_id: str | None = None,
        on_error: Callable[[Exception], None] | None = None,
        known: list[dict[str, Any]] | None = None,
    ) -> JournalRecorder:
        """A recorder numbering from above ``floor`` (a checkpoint's watermark) and above every
        event the journal already holds for the run (those an earlier attempt wrote after its
        last save). ``known``: those events as the caller just read them (every one above
        ``floor``), so the journal is not read twice."""
        highest = floor
        held = known if known is not None else await journal.read_from(floor + 1, run_id=run_id)
        for event in held:
            seq = event.get("seq")
            if isinstance(seq, int) and seq > highest:
                highest = seq
        return cls(
            journal,
            run_id=run_id,
            attempt=attempt,
            start_seq=highest,
            trace_id=trace_id,
            on_error=on_error,
        )

    def emit(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        task: str | None = None,
        agent: str | None = None,
        sources: Sequence[int] | None = None,
    ) -> int:
        """Record one event of type ``kind``; its ``seq``."""
        self.seq += 1
        event: dict[str, Any] = {
            "seq": self.seq,
            "timestampUnixMs": int(time.time() * 1000),
            "runId": self.run_id,
            "attempt": self.attempt,
            "type": kind,
        }
        if task is not None:
            event["taskId"] = task
        if agent is not None:
            event["agentName"] = agent
        if self.trace_id is not None:
            event["traceId"] = self.trace_id
        if sources is not None:
            event["sourceEventSeqs"] = list(sources)
        if payload:
            event.update(payload)
        self._pending.append(event)
        self._flush_soon()
        return self.seq

    def _flush_soon(self) -> None:
        if self._timer is not None and not self._timer.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next flush takes it
        self._timer = loop.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_INTERVAL_SECONDS)
        # Once its batch is taken, a flush finishes even if this timer is cancelled (``close``,
        # or the run's task): else the batch would be lost without a word.
        await asyncio.shield(self.flush())

    async def flush(self) -> None:
        """Append every event emitted so far (a failed append is reported and dropped)."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                await self.journal.append(batch)
            except Exception as exc:
                if self._on_error is not None:
                    self._on_error(exc)

    async def close(self) -> None:
        """Flush what is left and stop the timer (the journal itself stays open: its owner's).
        A timer's flush under way is waited for (the lock orders it before this one)."""
        timer = self._timer
        if timer is not None and not timer.done() and timer is not asyncio.current_task():
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
        await self.flush()
