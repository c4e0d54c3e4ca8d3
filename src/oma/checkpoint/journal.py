"""The journal layout of a checkpoint: a full snapshot plus the deltas of later boundaries.

In a store with journals (``oma.store.journal``: Redis, PostgreSQL, in-memory) a run can keep
its checkpoint as a journal under the checkpoint's key: record 0 is a whole v4 snapshot (the
base), every later boundary appends one delta (``oma.checkpoint.delta``) of the snapshot
against the one before, and when the deltas together outweigh the base a boundary writes a new
base instead (compaction: the bytes written stay within a small multiple of the final
snapshot). Readers apply the deltas to the base and get the same document the snapshot layout
would have stored, validated by the same rules.

Every write compares the journal's version (a few bytes) instead of the whole snapshot, so a
fenced attempt checks that it is still the live writer in one small read (``confirm``). A write
whose outcome is unknown (the store failed mid-call) is settled by the version at the next one.

A writer with a ``HistoryPolicy`` keeps the run's past: its records are headed and chained
(``oma.checkpoint.chain``), a compaction or a new attempt's claim appends its base instead of
replacing the journal (the store's ``rebase``: readers start there, the records before it stay),
and a base drops only what the policy lets go (``oma.checkpoint.retention``). Every boundary
kept can be rebuilt (``oma.checkpoint.history``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Literal

from oma import jsonutil
from oma.checkpoint import chain, delta, delta_diff, segments
from oma.checkpoint.boundary_note import note
from oma.checkpoint.delta_diff import DeltaEncoder
from oma.checkpoint.history import copy_back
from oma.checkpoint.keys import segments_journal_key
from oma.checkpoint.retention import HistoryPolicy, KnownBase, drop_before
from oma.checkpoint.segments import Named, Path, SegmentWriter
from oma.errors import CheckpointDecodeError, CheckpointFencedError, CheckpointLostError
from oma.gc_pause import gc_paused
from oma.store.journal import JournalEntry, JournalStore, new_version

# A new base once the deltas since the last one hold more than 4 times its bytes: a reader reads
# at most 5 times the base's bytes, and the bases grow geometrically, so they add up to a bounded
# multiple of the final snapshot (0.6x to 1.5x over 100 to 1,000 turns, by where the last
# compaction falls: docs/performance.md; ratio 2 gave 5.3x written over a 300-turn run in all,
# 1 gave 7.2x).
COMPACT_RATIO = 4.0
# A writer that keeps history names its long lists by segments (``oma.checkpoint.segments``), so
# its bases weigh little and it compacts once the deltas since the last base hold more than a
# fraction of what the document weighs: a restore applies a short tail. Fewer bytes than the
# floor never compact (a young run's deltas are cheap to apply).
TAIL_SHARE = 0.1
TAIL_FLOOR = 8 * 1024
VANISHED = "this attempt saved it earlier and nobody wrote a newer one"


@dataclass(frozen=True)
class StoredCheckpoint:
    """What a load found: the layout, and what a claim compares (a journal's version, or the
    snapshot's exact text)."""

    layout: Literal["journal", "snapshot"]
    token: str
    records: int = 1
    bytes: int = 0
    # The document is known to nest no deeper than the load's limit (see ``load_journal``).
    within_depth: bool = False
    chain: ChainState | None = None  # a journal's: where its next record goes, what it names
    segments: Named = dataclasses.field(default_factory=dict)  # what its base names by segment


@dataclass(frozen=True)
class ChainState:
    """Where a journal's history stands: the number its next record gets, the ``seq`` and
    digest of its last record (for a journal with no headers, ``seq`` is the number of records), and
    the bases a writer may drop records before (``oma.checkpoint.retention``)."""

    end: int = 0
    seq: int = 0
    digest: str | None = None
    bases: tuple[KnownBase, ...] = ()

    @classmethod
    def of(cls, entry: JournalEntry) -> ChainState:
        """The state of a journal read from its base. The last ``seq`` is the last readable
        header's, plus one per boundary after it (a damaged header does not stop the chain:
        ``oma verify`` names it); a journal without headers numbers its records from 1."""
        end = entry.start + len(entry.records)
        seq = after = 0
        for record in reversed(entry.records):
            line, body = chain.split(record)
            if line is None:
                break  # written before histories: numbered by position
            try:
                seq = chain.parse_header(line).seq + after
                break
            except ValueError:
                # A base's second record (the copy back into the runner's messages) is no
                # boundary of its own.
                after += 0 if copy_back(body) else 1
        base_line = chain.split(entry.records[0])[0]
        try:
            header = chain.parse_header(base_line) if base_line is not None else None
        except ValueError:
            header = None
        bases = (KnownBase(entry.start, header.seq, header.at),) if header is not None else ()
        if not seq:  # numbered as ``History`` numbers records without headers
            records = entry.records
            doubled = len(records) > 1 and chain.split(records[1])[0] is None
            doubled = doubled and base_line is None and copy_back(records[1])
            seq = end - (1 if doubled else 0)
        return cls(end, seq, chain.digest(entry.records[-1]), bases)


async def load_journal(
    store: JournalStore, key: str, depth_limit: int | None = None
) -> tuple[Any, StoredCheckpoint] | None:
    """The document a journal holds (base with every delta applied), or ``None``. With a
    ``depth_limit``, ``StoredCheckpoint.within_depth`` says whether the document is known to
    nest at most that many levels: the base bounded by the parser, each delta by what it wrote
    (``delta.apply_within``), so the reader need not walk the whole document."""
    # Both journals at once: the segments journal is read whole whatever the base names, so
    # its read need not wait for the base (one round trip's wait on a remote store, not two).
    entry, side = await asyncio.gather(
        store.journal_get(key),
        store.journal_get(segments_journal_key(key)),
        return_exceptions=True,
    )
    if isinstance(entry, BaseException):
        raise entry
    if entry is None:
        return None
    named = await segments.read_named(store, key, entry.records[0], side) if entry.records else None
    with gc_paused():
        return assemble_journal(entry, key, depth_limit, named)


def assemble_journal(
    entry: JournalEntry,
    key: str,
    depth_limit: int | None = None,
    segment_texts: dict[int, str] | None = None,
) -> tuple[Any, StoredCheckpoint]:
    """The document of a journal already read (``load_journal`` without the read), its
    base's segments given by number (``segments.read_named``)."""
    try:
        base = chain.body(entry.records[0])
        if depth_limit is None:
            document, within = jsonutil.loads(base), False
        else:
            document, within = jsonutil.loads_within(base, depth_limit)
    except ValueError as exc:
        raise CheckpointDecodeError(key, f"journal base: {exc}") from exc
    if not isinstance(document, dict):
        raise CheckpointDecodeError(key, "journal base is not a JSON object")
    try:
        named, fits = segments.resolve(document, segment_texts, depth_limit)
    except ValueError as exc:
        raise CheckpointDecodeError(key, f"journal base: {exc}") from exc
    within = within and fits
    shared: set[int] = set()  # the document is only read once built: copy on write
    for number, record in enumerate(entry.records[1:], start=1):
        try:
            ops = jsonutil.loads(chain.body(record))
            if not isinstance(ops, list):
                raise ValueError("a journal record is a JSON array of operations")
            if within and depth_limit is not None:
                within = delta.apply_within(document, ops, depth_limit, shared)
            else:
                delta.apply(document, ops, shared)
        except ValueError as exc:
            raise CheckpointDecodeError(
                key, f"journal record {entry.start + number}: {exc}"
            ) from exc
    size = sum(len(record) for record in entry.records)
    size += sum(len(text) for text in (segment_texts or {}).values())
    state = ChainState.of(entry)
    records = len(entry.records)
    stored = StoredCheckpoint("journal", entry.version, records, size, within, state, named)
    return document, stored


def base_records(wire: dict[str, Any], placeholders: dict[Path, Any] | None = None) -> list[str]:
    """The records of a new journal holding ``wire``: the snapshot, or, when an in-flight
    task holds its conversation twice (``conversationMessages`` and the runner's ``messages``,
    the same objects), the snapshot without the second copy and one delta that copies it
    back. A compaction then writes each message once: its bases weigh what the conversation
    does, not twice that. ``placeholders`` (by path) stand in the base for the lists kept as
    segments; the delta copies from the lists as a reader puts them back."""
    tasks = wire.get("inFlightTasks")
    if not isinstance(tasks, list) or not any(_doubled(task) for task in tasks):
        return [jsonutil.dumps(_with(wire, placeholders))]
    thin = {**wire, "inFlightTasks": [_thinned(task) for task in tasks]}
    ops = delta.relative(delta_diff.diff(thin, wire))
    return [jsonutil.dumps(_with(thin, placeholders)), jsonutil.dumps(ops)]


def _with(wire: dict[str, Any], placeholders: dict[Path, Any] | None) -> dict[str, Any]:
    """``wire`` with the value at each path replaced (the containers on the way copied)."""
    if not placeholders:
        return wire
    out = dict(wire)
    copied: set[Path] = set()
    for path, value in placeholders.items():
        node: Any = out
        for depth, step in enumerate(path[:-1]):
            if path[: depth + 1] not in copied:
                child = node[step]
                node[step] = list(child) if isinstance(child, list) else dict(child)
                copied.add(path[: depth + 1])
            node = node[step]
        node[path[-1]] = value
    return out


def _doubled(task: Any) -> bool:
    return (
        isinstance(task, dict) and isinstance(task.get("messages"), list) and bool(task["messages"])
    )


def _thinned(task: Any) -> Any:
    return {**task, "messages": []} if _doubled(task) else task


_Mode = Literal["append", "rebase", "replace"]


@dataclass
class _Written:
    version: str
    document: dict[str, Any]
    base_bytes: int
    tail_bytes: int
    chain: ChainState
    named_bytes: int = 0  # of the segments its base names


def _ids(items: Any, field: str) -> list[str]:
    if not isinstance(items, list):
        return []
    return [
        item[field] for item in items if isinstance(item, dict) and isinstance(item.get(field), str)
    ]


class JournalWriter:
    """One attempt's writes of a checkpoint journal. ``fenced``: every write compares the
    version this attempt wrote last, and losing that comparison stops the attempt; otherwise
    a lost comparison (another writer) makes this writer replace the journal (last one wins).
    ``history``: keep the run's past (see the module); ``None`` replaces the journal at each
    compaction and writes records without headers (the form before histories)."""

    def __init__(
        self,
        store: JournalStore,
        key: str,
        *,
        fenced: bool,
        history: HistoryPolicy | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.fenced = fenced
        self.history = history
        self.superseded = False
        self.current: _Written | None = None  # what this attempt believes is stored
        self._unknown: _Written | None = None  # a failed write that may have landed anyway
        self._adopted: StoredCheckpoint | None = None  # loaded, not claimed: continued
        self._deltas = DeltaEncoder()
        self._segments = SegmentWriter(store, key) if history is not None else None

    def adopt(self, loaded: StoredCheckpoint | None) -> None:
        """Continue the journal a restore loaded without claiming it (an unfenced run): the
        first save appends a base to it (keeping its history) instead of replacing it."""
        if loaded is not None and loaded.layout == "journal" and self.current is None:
            self._adopted = loaded
            self._adopt_segments(loaded)

    def _adopt_segments(self, loaded: StoredCheckpoint) -> None:
        if self._segments is not None:
            self._segments.adopt(loaded.segments)

    @staticmethod
    def _with_progress(wire: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        """The journal's metadata, with the tasks done and in all, the ids of the approval
        requests it waits for and has decided, and the run's budget, when there are any (what
        the operator's polls read instead of the journal: ``journal_head``, a few hundred
        bytes)."""
        queue = wire.get("queue")
        if not isinstance(queue, dict) or not isinstance(queue.get("tasks"), list):
            return metadata
        completed = queue.get("completed")
        done = len(completed) if isinstance(completed, list) else 0
        progress: dict[str, Any] = {"tasks": len(queue["tasks"]), "completed": done}
        turns = _turns_in_flight(wire.get("inFlightTasks"))
        if turns:  # a long task shows its progress before it completes
            progress["turns"] = turns
        extra: dict[str, Any] = {"progress": progress}
        pending = _ids(wire.get("pendingApprovals"), "id")
        if pending:
            decided = _ids(wire.get("approvalDecisions"), "requestId")
            extra["approvals"] = {"pending": pending, "decided": decided}
        budget = wire.get("budget")
        if isinstance(budget, dict):  # the spend, raises and tokens reserved: ~300 bytes
            reserved = budget.get("reserved") or []
            tokens = sum(r.get("tokens", 0) for r in reserved if isinstance(r, dict))
            extra["budget"] = {
                "spent": budget.get("spent"),
                "raised": budget.get("raised"),
                "reservedTokens": tokens,
            }
        return {**metadata, **extra}

    async def claim(
        self, wire: dict[str, Any], metadata: dict[str, Any], loaded: StoredCheckpoint | None
    ) -> bool:
        """Take the run over from what was loaded, writing a new base; ``False`` if it changed."""
        if loaded is not None and loaded.layout == "journal":
            self._adopt_segments(loaded)
            chain_state = loaded.chain or ChainState()
            written = await self._write(
                wire, metadata, expected=loaded.token, mode="rebase", began=True, on=chain_state
            )
            return written is not None
        return await self._write(wire, metadata, expected=None, mode="replace") is not None

    async def start(self, wire: dict[str, Any], metadata: dict[str, Any], what: str) -> bool:
        """Write a new run's journal (``False``: the key has one already), its first record
        saying ``what`` (a fork says where it came from)."""
        return (
            await self._write(wire, metadata, expected=None, mode="replace", what=what) is not None
        )

    async def save(
        self, wire: dict[str, Any], metadata: dict[str, Any], attempt: int | None
    ) -> None:
        await self._settle()
        current = self.current
        if current is None:
            adopted, self._adopted = self._adopted, None
            if adopted is not None:
                await self._replace_or_stop(
                    wire, metadata, adopted.token, attempt, on=adopted.chain or ChainState()
                )
            else:
                await self._replace_or_stop(wire, metadata, None, attempt)
            return
        record = jsonutil.dumps(delta.relative(self._deltas.diff(current.document, wire)))
        if current.tail_bytes + len(record) > self._tail_limit(current):
            await self._replace_or_stop(wire, metadata, current.version, attempt)
            return
        written = await self._write(
            wire, metadata, expected=current.version, mode="append", record=record
        )
        if written is None:
            await self._lost(wire, metadata, attempt)

    def _tail_limit(self, current: _Written) -> float:
        """The bytes of deltas since the last base past which a save compacts."""
        if self._segments is None:
            return max(current.base_bytes * COMPACT_RATIO, 1)
        return max((current.base_bytes + current.named_bytes) * TAIL_SHARE, TAIL_FLOOR)

    async def confirm(self) -> None:
        """Before a tool runs: stop if a newer attempt wrote since this one's last write. A
        read that fails lets the tool run (the next write is still compared)."""
        if self.superseded:
            raise CheckpointFencedError(self.key, None)
        if not self.fenced or self.current is None:
            return
        try:
            stored = await self.store.journal_version(self.key)
        except Exception:
            return
        if stored == self.current.version:
            return
        if self._unknown is not None and stored == self._unknown.version:
            self.current, self._unknown = self._unknown, None
            return
        self.superseded = True
        if stored is None:
            raise CheckpointLostError(self.key, None, VANISHED)
        raise CheckpointFencedError(self.key, None)

    async def _replace_or_stop(
        self,
        wire: dict[str, Any],
        metadata: dict[str, Any],
        expected: str | None,
        attempt: int | None,
        on: ChainState | None = None,
    ) -> None:
        """A new base: appended to the journal this attempt continues (``on``, or what it
        wrote) when it keeps history and there is one; else the journal replaced."""
        mode: _Mode = "rebase" if expected is not None else "replace"
        if await self._write(wire, metadata, expected=expected, mode=mode, on=on) is None:
            await self._lost(wire, metadata, attempt)

    async def _lost(
        self, wire: dict[str, Any], metadata: dict[str, Any], attempt: int | None
    ) -> None:
        """The comparison failed: another writer (or a delete) came in between."""
        if not self.fenced:
            await self._write(wire, metadata, expected=None, mode="replace", force=True)
            return
        self.superseded = True
        vanished = False
        if self.current is not None:
            try:
                vanished = await self.store.journal_version(self.key) is None
            except Exception:
                vanished = False  # unknown: fenced is the safe reading, it stops the attempt too
        if vanished:
            raise CheckpointLostError(self.key, attempt, VANISHED)
        # This attempt never wrote the journal: another start of the run wrote it first.
        raise CheckpointFencedError(self.key, attempt, first_save=self.current is None)

    async def _write(
        self,
        wire: dict[str, Any],
        metadata: dict[str, Any],
        *,
        expected: str | None,
        mode: _Mode,
        force: bool = False,
        record: str | None = None,
        began: bool = False,
        on: ChainState | None = None,
        what: str | None = None,
    ) -> _Written | None:
        """One write: ``record`` appended, or a base (``rebase`` with history, else a
        replacement). ``on``: the chain to continue when this attempt has written nothing."""
        version = new_version()
        metadata = self._with_progress(wire, metadata)
        named_bytes = 0
        if record is not None:
            texts = [record]
        elif self._segments is not None:
            if mode == "replace":
                self._segments.forget()  # a new journal: it names only segments it writes
            placeholders, named_bytes = await self._segments.placeholders(wire)
            texts = base_records(wire, placeholders)
        else:
            texts = base_records(wire)
        current = self.current
        state = on if on is not None else current.chain if current is not None else ChainState()
        rebase = mode == "rebase" and self.history is not None
        replace = mode == "replace" or (mode == "rebase" and self.history is None)
        drop: int | None = None
        if self.history is not None:
            previous = current.document if current is not None and on is None else None
            texts, state = self._chained(
                texts,
                state,
                wire,
                previous,
                began,
                replace=replace,
                is_base=record is None,
                what=what,
            )
            metadata = {**metadata, "history": {"seq": state.seq, "digest": state.digest}}
            if rebase:
                drop = drop_before(self.history, state.bases, state.seq, state.bases[-1].at)
                if drop is not None:
                    kept = tuple(b for b in state.bases if b.number >= drop)
                    state = dataclasses.replace(state, bases=kept)
        else:
            start = 0 if replace else state.end
            state = ChainState(start + len(texts), state.seq + 1, None, ())
        size = sum(len(text) for text in texts)
        if replace or rebase or current is None:
            written = _Written(version, wire, size, 0, state, named_bytes)
        else:
            tail = current.tail_bytes + size
            written = _Written(version, wire, current.base_bytes, tail, state, current.named_bytes)
        try:
            ok = await self.store.journal_write(
                self.key,
                texts,
                version=version,
                expected=expected,
                replace=replace,
                force=force,
                metadata=metadata,
                rebase=rebase,
                drop_before=drop,
            )
        except Exception:
            self._unknown = written
            raise
        if not ok:
            return None
        self.current, self._unknown = written, None
        return written

    def _chained(
        self,
        texts: list[str],
        state: ChainState,
        wire: dict[str, Any],
        previous: dict[str, Any] | None,
        began: bool,
        *,
        replace: bool,
        is_base: bool,
        what: str | None = None,
    ) -> tuple[list[str], ChainState]:
        """``texts`` headed and chained after ``state`` (a replacement starts a new chain,
        its numbers from 0, its ``seq`` going on), and the state after them."""
        at = int(time.time() * 1000)
        seq = state.seq + 1
        task, noted = note(previous, wire, began=began)
        what = what or noted
        identity = wire.get("identity")
        attempt = identity.get("attempt") if isinstance(identity, dict) else None
        number = 0 if replace else state.end
        prev = None if replace else state.digest
        out: list[str] = []
        for index, text in enumerate(texts):
            kind: chain.Kind = "delta" if not is_base else "base" if index == 0 else "more"
            header = chain.RecordHeader(
                seq=seq,
                prev=prev,
                sha="0" * chain.DIGEST_CHARS,  # sealed below, once every other value is set
                at=at,
                attempt=attempt if isinstance(attempt, int) and attempt >= 1 else None,
                kind=kind,
                task=task,
                what=what,
            )
            header = header.model_copy(update={"sha": chain.sealed(header, text)})
            out.append(chain.headed(header, text))
            prev = chain.digest(out[-1])
        bases = state.bases if not replace else ()
        if is_base:
            bases = (*bases, KnownBase(number, seq, at))
        return out, ChainState(number + len(out), seq, prev, bases)

    async def _settle(self) -> None:
        """After a write that failed: adopt it if it landed; else write from what is known."""
        if self._unknown is None:
            return
        stored = await self.store.journal_version(self.key)
        unknown, self._unknown = self._unknown, None
        known = self.current.version if self.current is not None else None
        if stored == unknown.version:
            self.current = unknown
        elif stored != known:
            if not self.fenced:
                self.current = None  # the next write replaces whatever is there
                return
            self.superseded = True
            if stored is None:
                raise CheckpointLostError(self.key, None, VANISHED)
            raise CheckpointFencedError(self.key, None)


def _turns_in_flight(tasks: Any) -> int:
    """The model turns the tasks in flight have taken so far."""
    if not isinstance(tasks, list):
        return 0
    return sum(t["turns"] for t in tasks if isinstance(t, dict) and type(t.get("turns")) is int)
