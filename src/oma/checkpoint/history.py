"""A checkpoint journal's history read back: its boundaries, any one rebuilt, its chain checked.

Built from every record the journal keeps (``journal_get(key, history=True)``), headed and
chained as ``oma.checkpoint.chain`` writes them. A record without a header (written before
histories, or with history off) counts as its own boundary, numbered by its position.
``rebuild(seq)`` applies the records from the last base at or before ``seq`` through the last
record of ``seq``: the document saved then. ``verify()`` names each record that was changed, is
unreadable or does not follow the one before; the journal's metadata vouches for the last one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from oma import jsonutil
from oma.checkpoint import chain, delta, segments
from oma.checkpoint.chain import RecordHeader
from oma.checkpoint.keys import segments_journal_key
from oma.errors import CheckpointDecodeError, CheckpointHistoryError
from oma.store.base import MemoryStore
from oma.store.journal import JournalEntry, JournalStore, supports_journal


@dataclass(frozen=True)
class Boundary:
    """One saved boundary: ``numbers`` are its records' numbers in the journal."""

    seq: int
    at: int | None
    attempt: int | None
    kind: str  # "base": a whole snapshot; "delta": the changes since the boundary before
    task: str | None
    what: str
    numbers: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Finding:
    """A record ``verify`` found wrong: its number, its boundary when known, what is wrong;
    ``segment``: a record of the checkpoint's segments journal (numbered there), not of the
    journal itself."""

    number: int
    seq: int | None
    problem: str
    segment: bool = False


@dataclass
class _Record:
    number: int
    text: str
    header: RecordHeader | None
    header_problem: str | None
    seq: int
    kind: str


@dataclass
class History:
    """The records a journal keeps, with their headers read."""

    key: str
    entry: JournalEntry
    records: list[_Record] = field(default_factory=list)
    # The records of the checkpoint's segments journal, by number (``oma.checkpoint.segments``).
    segment_texts: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, entry: JournalEntry, segment_texts: dict[int, str] | None = None) -> History:
        history = cls(entry.key, entry, segment_texts=segment_texts or {})
        for number, text in enumerate(entry.records, start=entry.start):
            line, body = chain.split(text)
            header: RecordHeader | None = None
            problem: str | None = None
            if line is not None:
                try:
                    header = chain.parse_header(line)
                except ValueError as exc:
                    problem = str(exc)
            if header is not None:
                seq, kind = header.seq, header.kind
            else:  # no header, or one unreadable: placed by position (verify names it)
                seq = history.records[-1].seq + 1 if history.records else number + 1
                kind = "base" if body.startswith("{") else "delta"
                before = history.records[-1] if history.records else None
                if before and before.kind == "base" and copy_back(body):
                    seq, kind = before.seq, "more"  # a base's second record, its header unread
            history.records.append(_Record(number, text, header, problem, seq, kind))
        return history

    @property
    def chained(self) -> bool:
        """Whether the journal keeps a history (its records carry headers)."""
        return any(r.header is not None for r in self.records)

    def boundaries(self) -> list[Boundary]:
        """Every boundary kept, oldest first."""
        grouped: dict[int, list[_Record]] = {}
        for record in self.records:
            grouped.setdefault(record.seq, []).append(record)
        out = []
        for seq, records in grouped.items():
            header = records[0].header
            out.append(
                Boundary(
                    seq=seq,
                    at=header.at if header else None,
                    attempt=header.attempt if header else None,
                    kind="base" if records[0].kind == "base" else "delta",
                    task=header.task if header else None,
                    what=header.what if header else records[0].header_problem or "",
                    numbers=tuple(r.number for r in records),
                    bytes=sum(len(r.text) for r in records),
                )
            )
        return out

    def rebuild(self, seq: int) -> dict[str, Any]:
        """The snapshot document saved at boundary ``seq``."""
        last = max((i for i, r in enumerate(self.records) if r.seq == seq), default=None)
        if last is None:
            raise CheckpointHistoryError(self.key, self._not_kept(seq))
        first = max((i for i in range(last + 1) if self.records[i].kind == "base"), default=None)
        if first is None:
            raise CheckpointHistoryError(
                self.key, f"boundary {seq} has no base before it among the records kept"
            )
        document: Any = None
        for record in self.records[first : last + 1]:
            document = self._apply(document, record)
        assert isinstance(document, dict)
        return document

    def _apply(self, document: Any, record: _Record) -> Any:
        try:
            parsed = jsonutil.loads(chain.split(record.text)[1])
            if record.kind == "base":
                if not isinstance(parsed, dict):
                    raise ValueError("a base is a JSON object")
                segments.resolve(parsed, self.segment_texts)
                return parsed
            if not isinstance(parsed, list):
                raise ValueError("a delta is a JSON array of operations")
            delta.apply(document, parsed)
            return document
        except ValueError as exc:
            raise CheckpointDecodeError(self.key, f"journal record {record.number}: {exc}") from exc

    def _not_kept(self, seq: int) -> str:
        if not self.records:
            return f"boundary {seq} is not kept: the journal has no records"
        return (
            f"boundary {seq} is not kept: this journal keeps boundaries "
            f"{self.records[0].seq} to {self.records[-1].seq}"
        )

    def verify(self) -> list[Finding]:
        """Every record found changed, unreadable or out of place (empty: the chain holds)."""
        found: dict[int, Finding] = {}

        def name(index: int, problem: str) -> None:
            record = self.records[index]
            found.setdefault(record.number, Finding(record.number, record.seq, problem))

        named: set[int] = set()

        def name_at(index: int, problem: str) -> None:
            named.add(index)
            name(index, problem)

        # A journal written before histories and continued with one: its older records have
        # no header, and that is no fault.
        first_headed = next(
            (i for i, r in enumerate(self.records) if r.header or r.header_problem), None
        )
        for index, record in enumerate(self.records):
            if record.header_problem is not None:
                name_at(index, record.header_problem)
            elif record.header is None:
                if first_headed is not None and index > first_headed:
                    name_at(index, "it has no header, after records that have one")
            elif record.header.sha != chain.sealed(record.header, chain.split(record.text)[1]):
                name_at(index, "its content is not what it was written with (changed since)")
        # Link i joins record i - 1 to record i (link 0: the first record's own prev; link
        # len: the metadata's digest of the last). Every record's values are checked above: a
        # record named there explains the links on both sides of it (its prev may be what
        # changed); a broken link with both ends intact means record i - 1's text changed
        # without its values (its layout), or records were lost or moved (the order says).
        changed = "its text is not what the next record names (changed after it was written)"
        last = len(self.records)
        for link in sorted(self._broken_links()):
            culprit = min(link, last - 1) if link in (0, last) else link - 1
            if culprit not in named and (link in (0, last) or link not in named):
                name_at(culprit, changed)
        self._check_order(name)
        bad = self._check_segments(named)
        self._check_bodies(name, named, set(bad))
        segment_findings = [Finding(n, None, problem, segment=True) for n, problem in bad.items()]
        return sorted(found.values(), key=lambda f: f.number) + sorted(
            segment_findings, key=lambda f: f.number
        )

    def _check_segments(self, named: set[int]) -> dict[int, str]:
        """Each segment a base names that is missing, changed or not its items; bases found
        changed (``named``: their indexes) are no evidence of what they name."""
        bad: dict[int, str] = {}
        known: dict[tuple[int, str], int] = {}  # segments found right, shared by every base
        for index, record in enumerate(self.records):
            if record.kind != "base" or segments.MARK not in record.text or index in named:
                continue
            try:
                document = jsonutil.loads(chain.split(record.text)[1])
            except ValueError:
                continue
            for number, problem in segments.check(document, self.segment_texts, known).items():
                bad.setdefault(number, problem)
        return bad

    def _broken_links(self) -> set[int]:
        """Indexes i whose record does not name the digest of record i - 1 (i = len: the
        journal's metadata does not name the last record's)."""
        broken: set[int] = set()
        for index in range(1, len(self.records)):
            header = self.records[index].header
            if header is not None and header.prev != chain.digest(self.records[index - 1].text):
                broken.add(index)
        first = self.records[0].header if self.records else None
        if first is not None and self.entry.start == 0 and first.prev is not None:
            broken.add(0)  # the journal's first record names one before it
        vouched = (self.entry.metadata or {}).get("history")
        last = chain.digest(self.records[-1].text) if self.records else None
        if self.chained and isinstance(vouched, dict) and vouched.get("digest") != last:
            broken.add(len(self.records))
        return broken

    def _check_order(self, name: Any) -> None:
        for index in range(1, len(self.records)):
            before, record = self.records[index - 1], self.records[index]
            if record.header is None or before.header is None:
                continue
            expected = before.seq if record.kind == "more" else before.seq + 1
            if record.seq != expected:
                name(index, f"its boundary is {record.seq} where {expected} was expected")

    def walk(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every boundary kept and its document, oldest first, in one pass (the document is
        the same object, changed in place: copy what you keep). A record that does not apply
        raises ``CheckpointDecodeError`` naming it."""
        document: Any = None
        for index, record in enumerate(self.records):
            if record.kind != "base" and document is None:
                continue  # kept records that start after a base dropped: nothing to apply to
            document = self._apply(document, record)
            following = self.records[index + 1] if index + 1 < len(self.records) else None
            if following is None or following.seq != record.seq:
                yield record.seq, document

    def _check_bodies(self, name: Any, changed: set[int], bad_segments: set[int]) -> None:
        """Each record applied to the boundary before it; after a record found ``changed``
        (by index) nothing is applied up to the next base: what fails then is no evidence."""
        document: Any = None
        for index, record in enumerate(self.records):
            if index in changed:
                document = None
                continue
            if record.kind != "base" and document is None:
                continue
            try:
                document = self._apply(document, record)
            except CheckpointDecodeError as exc:
                cause = exc.__cause__ if record.kind == "base" else None
                if not (isinstance(cause, segments.SegmentError) and cause.number in bad_segments):
                    name(index, exc.detail)  # else the segment's own finding says it
                document = None


def copy_back(body: str) -> bool:
    """Whether an unheaded delta only copies conversations back into the runner's messages:
    the second record of a base written in two (``journal.base_records``), not a boundary."""
    try:
        ops = delta.resolved(jsonutil.loads(body))
    except (ValueError, TypeError):
        return False
    return bool(ops) and all(
        isinstance(op, list)
        and isinstance(op[1], list)
        and len(op[1]) >= 3
        and op[1][0] == "inFlightTasks"
        and op[1][2] == "messages"
        for op in ops
    )


async def read_history(store: JournalStore, key: str) -> History | None:
    """The history of the journal at ``key``, or ``None`` when there is no journal."""
    entry = await store.journal_get(key, history=True)
    if entry is None:
        return None
    texts: dict[int, str] = {}
    if any(segments.MARK in text for text in entry.records):
        side = await store.journal_get(segments_journal_key(key), history=True)
        texts = segments.by_number(side)
    return History.of(entry, texts)


async def load_history(store: MemoryStore, key: str) -> History | None:
    """The history of the checkpoint at ``key`` (``None``: no checkpoint there);
    ``CheckpointHistoryError`` when it is kept in a form that keeps no past."""
    if not supports_journal(store):
        if await store.get(key) is None:
            return None
        raise CheckpointHistoryError(
            key, "it is kept in a store without journals (a file store keeps the latest only)"
        )
    history = await read_history(store, key)
    if history is None:
        if await store.get(key) is None:
            return None
        raise CheckpointHistoryError(
            key, "it is kept as a whole snapshot (layout: snapshot), which keeps no past"
        )
    return history
