"""Saving a run's checkpoint: serialised, best-effort by default, optionally fenced.

Ordinary saves are best-effort: a failure is reported as an ``error`` event of kind
``checkpoint_save_failed`` and the run continues; the next boundary saves again. Strict saves
(suspensions) raise instead. A run keeps its checkpoint in one layout
(``oma.checkpoint.journal``): the journal when the options ask for it and the store has
journals, or when the run was found in one; else whole snapshots. A fenced save is a
compare-and-set from the string (or, in a journal, the version) this attempt wrote last; when
another attempt wrote in between, this attempt is superseded and every later save (and so
every tool commit) raises ``CheckpointFencedError``; ``CheckpointLostError`` (a subclass) when
the checkpoint is gone rather than replaced. Every save that completes emits
``checkpoint_saved`` (``data["seconds"]``: building the snapshot and writing it), e.g. for
metrics.
"""

from __future__ import annotations

import asyncio
import time

from oma.checkpoint.attempts import append_attempt, attempt_record
from oma.checkpoint.journal import JournalWriter, StoredCheckpoint
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.retention import HistoryPolicy
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.errors import CheckpointFencedError, CheckpointLostError
from oma.orchestrator.context import RunContext
from oma.orchestrator.events import OrchestratorEvent
from oma.orchestrator.snapshot_build import build_snapshot, encode_snapshot
from oma.orchestrator.snapshot_wire import EncodedSnapshot
from oma.store.base import supports_compare_and_set
from oma.store.journal import supports_journal

VANISHED = "this attempt saved it earlier and nobody wrote a newer one"


async def save_run(context: RunContext, *, strict: bool = False) -> bool:
    """Save the run at a boundary; ``False`` when it has no checkpoint or a best-effort save
    failed (reported as an event)."""
    return await context.checkpoint.save(context, strict=strict) if context.checkpoint else False


class ActiveCheckpoint:
    def __init__(
        self,
        checkpoint: Checkpoint,
        *,
        embed_shared_memory: bool,
        fence: bool = False,
        attempt_log: bool = False,
        journal: bool = False,
        history: HistoryPolicy | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.embed_shared_memory = embed_shared_memory
        store = checkpoint.store
        self.fenced_saves = fence and supports_compare_and_set(store)
        self.fence_unavailable = fence and not self.fenced_saves
        self.history = history
        self.journal: JournalWriter | None = None
        if journal and supports_journal(store):
            self.journal = self._journal_writer()
        self.superseded = False
        self.expected: str | None = None  # what this attempt believes is stored
        self._unknown: str | None = None  # a failed write that may have landed anyway
        self._lock = asyncio.Lock()
        self.attempt_logged = not attempt_log  # nothing to log when the log is off

    def assert_current(self) -> None:
        if self.superseded:
            raise CheckpointFencedError(self.checkpoint.key, None)

    async def confirm_current(self) -> None:
        """Before a tool runs: a fenced attempt reads the checkpoint and stops if a newer
        attempt wrote it since this attempt's last save (which a compare-and-set would only
        reveal after the tool ran). A read that fails lets the tool run: the next save is
        still fenced, and idempotency keys cover the remaining window."""
        self.assert_current()
        if self.journal is not None:
            async with self._lock:
                try:
                    await self.journal.confirm()
                finally:
                    self.superseded = self.journal.superseded
            return
        if not self.fenced_saves or self.expected is None:
            return
        async with self._lock:  # not while a save of ours is landing
            self.assert_current()
            try:
                entry = await self.checkpoint.store.get(self.checkpoint.key)
            except Exception:
                return
            stored = entry.value if entry is not None else None
            if stored == self.expected:
                return
            if stored is not None and stored == self._unknown:
                self.expected, self._unknown = stored, None
                return
            self.superseded = True
            if stored is None:
                raise CheckpointLostError(self.checkpoint.key, None, VANISHED)
            raise CheckpointFencedError(self.checkpoint.key, None)

    async def claim(self, context: RunContext, loaded: StoredCheckpoint | None) -> bool:
        """Take over the run by rewriting what was loaded; ``False`` if it changed meanwhile.
        The run stays in the layout it was found in."""
        self._keep_layout(loaded)
        if not self.fenced_saves:
            if self.journal is not None:
                self.journal.adopt(loaded)
            return True
        async with self._lock:
            logged = await self._attempt_snapshot(context)
            encoded = await encode_snapshot(context, embed_shared_memory=self.embed_shared_memory)
            if self.journal is not None:
                if not await self.journal.claim(encoded.wire, encoded.metadata, loaded):
                    return False
                await self._log_attempt(context, logged)
                return True
            text = loaded.token if loaded is not None else None
            written = await self.checkpoint.save_text_if(encoded.text, encoded.metadata, text)
            if written is None:
                return False
            self.expected = written
            await self._log_attempt(context, logged)
            return True

    async def save(self, context: RunContext, *, strict: bool = False) -> bool:
        async with self._lock:
            self.assert_current()
            started = time.monotonic()
            try:
                logged = await self._attempt_snapshot(context)
                encoded = await encode_snapshot(
                    context, embed_shared_memory=self.embed_shared_memory
                )
                if context.recorder is not None:
                    # The journal holds every event the snapshot reflects before it lands.
                    await context.recorder.flush()
                if self.journal is not None:
                    await self._journal_save(encoded, context.identity.attempt)
                elif self.fenced_saves:
                    await self._fenced_save(encoded, context.identity.attempt)
                else:
                    await self.checkpoint.save_text(encoded.text, encoded.metadata)
                seconds = time.monotonic() - started  # snapshot + write, not the attempt log
                await self._log_attempt(context, logged)
            except CheckpointFencedError:
                raise
            except Exception as exc:
                if strict:
                    raise
                context.emit(
                    OrchestratorEvent(
                        type="error", data={"kind": "checkpoint_save_failed", "error": exc}
                    )
                )
                return False
            context.emit(OrchestratorEvent(type="checkpoint_saved", data={"seconds": seconds}))
            watermark = encoded.wire.get("journalWatermarkSeq")
            if watermark is not None:
                saved = {"mode": context.mode, "version": 5, "watermarkSeq": watermark}
                context.journal("checkpoint/saved", saved)
            return True

    async def _attempt_snapshot(self, context: RunContext) -> CheckpointSnapshotV4 | None:
        """The snapshot model the attempt record is made from, until the attempt is logged
        (the encoded text written next to it is the same state)."""
        if self.attempt_logged:
            return None
        return await build_snapshot(context, embed_shared_memory=self.embed_shared_memory)

    async def _log_attempt(
        self, context: RunContext, snapshot: CheckpointSnapshotV4 | None
    ) -> None:
        """Once per attempt, after its first write: best-effort, like ordinary saves."""
        if self.attempt_logged or snapshot is None:
            return
        self.attempt_logged = True
        try:
            await append_attempt(
                self.checkpoint.store, self.checkpoint.key, attempt_record(snapshot)
            )
        except Exception as exc:
            context.emit(
                OrchestratorEvent(type="error", data={"kind": "attempt_log_failed", "error": exc})
            )

    def _keep_layout(self, loaded: StoredCheckpoint | None) -> None:
        if loaded is None:
            return
        store = self.checkpoint.store
        if loaded.layout == "journal" and self.journal is None and supports_journal(store):
            self.journal = self._journal_writer()
        elif loaded.layout == "snapshot":
            self.journal = None

    def _journal_writer(self) -> JournalWriter:
        store = self.checkpoint.store
        assert supports_journal(store)
        return JournalWriter(
            store, self.checkpoint.key, fenced=self.fenced_saves, history=self.history
        )

    async def _journal_save(self, encoded: EncodedSnapshot, attempt: int) -> None:
        assert self.journal is not None
        try:
            await self.journal.save(encoded.wire, encoded.metadata, attempt)
        finally:
            self.superseded = self.journal.superseded

    async def _fenced_save(self, encoded: EncodedSnapshot, attempt: int) -> None:
        text, metadata = encoded.text, encoded.metadata
        try:
            written = await self.checkpoint.save_text_if(text, metadata, self.expected)
        except Exception:
            self._unknown = text  # the write may have landed even though the call failed
            raise
        if written is None and self._unknown is not None and await self._landed(self._unknown):
            written = await self.checkpoint.save_text_if(text, metadata, self.expected)
        if written is None:
            self.superseded = True
            if self.expected is not None and await self._vanished():
                raise CheckpointLostError(self.checkpoint.key, attempt, VANISHED)
            first = self.expected is None  # this attempt never saved: another start beat it
            raise CheckpointFencedError(self.checkpoint.key, attempt, first_save=first)
        self.expected, self._unknown = written, None

    async def _vanished(self) -> bool:
        """Whether the checkpoint this attempt wrote is gone (not replaced by a newer one)."""
        try:
            return await self.checkpoint.store.get(self.checkpoint.key) is None
        except Exception:
            return False  # unknown: fenced is the safe reading, it stops the attempt too

    async def _landed(self, value: str) -> bool:
        entry = await self.checkpoint.store.get(self.checkpoint.key)
        if entry is None or entry.value != value:
            return False
        self.expected = value
        return True
