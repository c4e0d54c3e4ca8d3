"""Segments: the long lists of a journal's bases, written once and named by every later base.

A task's conversation only grows, and so do its tool calls: an item once written never changes
(and a completed task's result, messages and calls included, not at all). A writer that keeps
history (``oma.checkpoint.journal``) writes those lists' items, as they accumulate, into
*segment records* of a second journal beside the checkpoint
(``__oma_checkpoint__/<runId>/segments``), and a base names them instead of repeating them:

    {"conversationMessages": {"$segments": [[number, digest, count], ...], "rest": [...]}}

A base then weighs the run's small state, so compacting often costs little, and a restore
reads a short tail of deltas plus the segments, each parsed as one JSON array: time in
proportion to bytes, not to operations. The base is chained (its header seals its body), so
the digests it names vouch for the segments: a changed, lost or foreign segment is refused
(``CheckpointDecodeError`` naming it), never read. Segments no base names (a writer that lost
a race, a task that ended) stay until the checkpoint is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from oma import jsonutil
from oma.checkpoint import chain
from oma.checkpoint.keys import segments_journal_key
from oma.errors import CheckpointFencedError
from oma.store.journal import JournalEntry, JournalStore, new_version

SEGMENTED = ("conversationMessages", "toolCalls")  # the lists of a task in flight that grow
COMPLETED = ("messages", "toolCalls")  # of a completed task's ``agentResult``
MARK = "$segments"
# New items weighing less stay in the base (``rest``): a segment is worth its lookup.
MIN_SEGMENT_BYTES = 1024
# A segment list sits at most five levels down (document, completedTaskResults, a result, its
# agentResult, the field): the depth it may nest is the limit less the levels above it.
_LEVELS_ABOVE = 4
_WRITE_TRIES = 5


class SegmentRef(NamedTuple):
    """A segment a base names: its number in the segments journal, its digest, its items."""

    number: int
    digest: str
    items: int


ListId = tuple[str, str]  # a task's id, and which of its lists
Named = dict[ListId, tuple[SegmentRef, ...]]
Path = tuple[str | int, ...]


class Place(NamedTuple):
    """Where a long list sits: its container, its field there, its path, and its list id
    (``None``: its task names no id, so a writer leaves it whole)."""

    container: dict[str, Any]
    field: str
    path: Path
    list_id: ListId | None


def places(document: Any) -> list[Place]:
    """Every place of ``document`` whose list may be kept as segments."""
    if not isinstance(document, dict):
        return []
    out: list[Place] = []
    tasks = document.get("inFlightTasks")
    for index, task in enumerate(tasks if isinstance(tasks, list) else ()):
        if isinstance(task, dict):
            task_id = task.get("taskId")
            for field in SEGMENTED:
                list_id = (task_id, field) if isinstance(task_id, str) else None
                out.append(Place(task, field, ("inFlightTasks", index, field), list_id))
    done = document.get("completedTaskResults")
    for index, entry in enumerate(done if isinstance(done, list) else ()):
        result = entry.get("agentResult") if isinstance(entry, dict) else None
        if isinstance(result, dict):
            task_id = entry.get("taskId")
            for field in COMPLETED:
                list_id = (task_id, f"agentResult.{field}") if isinstance(task_id, str) else None
                path = ("completedTaskResults", index, "agentResult", field)
                out.append(Place(result, field, path, list_id))
    return out


def _refs(value: dict[str, Any]) -> tuple[tuple[SegmentRef, ...], list[Any]]:
    """The segments a base's placeholder names, and its rest; ``ValueError`` if malformed."""
    if set(value) != {MARK, "rest"}:
        raise ValueError(f"a list replaced by segments holds {MARK!r} and 'rest' only")
    named, rest = value[MARK], value["rest"]
    if not isinstance(named, list) or not isinstance(rest, list):
        raise ValueError(f"{MARK!r} and 'rest' are lists")
    refs = []
    for item in named:
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError("a segment is named by [number, digest, count]")
        number, digest, count = item
        valid = type(number) is int and number >= 0 and type(count) is int and count >= 1
        if not valid or not isinstance(digest, str) or len(digest) != chain.DIGEST_CHARS:
            raise ValueError(f"a segment is named by [number, digest, count], not {item!r:.80}")
        refs.append(SegmentRef(number, digest, count))
    return tuple(refs), rest


def _placeholders(document: Any) -> list[tuple[Place, dict[str, Any]]]:
    """Each place of a base whose list is replaced by segments, and what stands there."""
    return [
        (place, place.container[place.field])
        for place in places(document)
        if isinstance(place.container.get(place.field), dict)
    ]


def named_numbers(document: Any) -> set[int]:
    """The segment numbers a base names (malformed placeholders are left to ``resolve``)."""
    numbers: set[int] = set()
    for _, value in _placeholders(document):
        try:
            numbers.update(ref.number for ref in _refs(value)[0])
        except ValueError:
            continue
    return numbers


def resolve(
    document: Any, texts: Mapping[int, str] | None, depth_limit: int | None = None
) -> tuple[Named, bool]:
    """Put back, in place, each list a base names by segments; the segments found per list,
    and whether every segment is known to nest within ``depth_limit`` (for the list's place).
    ``ValueError`` names a segment that is missing, changed or not a list of its count."""
    named: Named = {}
    found = [(place, *_refs(value)) for place, value in _placeholders(document)]
    wanted = [ref for *_, refs, _ in found for ref in refs]
    for ref in wanted:
        text = texts.get(ref.number) if texts is not None else None
        if text is None:
            raise ValueError(f"segment {ref.number} it names is missing from the store")
        if chain.digest(text) != ref.digest:
            raise ValueError(f"segment {ref.number} changed since it was named")
    chunks, within = _parsed([texts[ref.number] for ref in wanted] if texts else [], depth_limit)
    for ref, chunk in zip(wanted, chunks, strict=True):
        if not isinstance(chunk, list) or len(chunk) != ref.items:
            raise ValueError(f"segment {ref.number} does not hold the {ref.items} items named")
    at = 0
    for place, refs, rest in found:
        items: list[Any] = []
        for chunk in chunks[at : at + len(refs)]:
            items.extend(chunk)
        at += len(refs)
        items.extend(rest)
        place.container[place.field] = items
        if place.list_id is not None:
            named[place.list_id] = refs
    return named, within and depth_limit is not None


def check(document: Any, texts: Mapping[int, str]) -> dict[int, str]:
    """What is wrong with each segment a base names, by number (empty: each is what it says)."""
    bad: dict[int, str] = {}
    for _, value in _placeholders(document):
        try:
            refs = _refs(value)[0]
        except ValueError:
            continue  # the base's own fault: its assembly names it
        for ref in refs:
            text = texts.get(ref.number)
            if text is None:
                bad[ref.number] = "this segment a base names is missing from the store"
            elif chain.digest(text) != ref.digest:
                bad[ref.number] = "its content is not what the bases that name it say (changed)"
            else:
                try:
                    chunk = jsonutil.loads(text)
                except ValueError:
                    chunk = None
                if not isinstance(chunk, list) or len(chunk) != ref.items:
                    bad[ref.number] = f"it does not hold the {ref.items} items its bases name"
    return bad


def _parsed(texts: list[str], depth_limit: int | None) -> tuple[list[Any], bool]:
    """Every segment parsed in one call (the depth bound costs one padding, not one per
    segment), and whether each is known to nest within its place under ``depth_limit``.
    ``ValueError`` unless the texts are that many JSON values."""
    if not texts:
        return [], True
    joined = "[" + ",".join(texts) + "]"
    if depth_limit is None:
        values, within = jsonutil.loads(joined), False
    else:  # the joined list is one level above each segment's place
        values, within = jsonutil.loads_within(joined, depth_limit - _LEVELS_ABOVE + 1)
    if not isinstance(values, list) or len(values) != len(texts):
        raise ValueError("the segments named are not one JSON array each")
    return values, within


async def read_named(store: JournalStore, key: str, base: str) -> dict[int, str] | None:
    """The segment records a base (a record's text) names, read from the checkpoint ``key``'s
    segments journal, by number (``None``: it names none). A plain read first; the history
    only when a named number lies before the segments journal's own base."""
    body = chain.body(base)
    if MARK not in body:
        return None
    try:
        numbers = named_numbers(jsonutil.loads(body))
    except ValueError:
        return None  # the assembly names what is wrong with the base
    if not numbers:
        return None
    side = segments_journal_key(key)
    texts = by_number(await store.journal_get(side))
    if not numbers <= texts.keys():
        texts = by_number(await store.journal_get(side, history=True))
    return texts


def by_number(entry: JournalEntry | None) -> dict[int, str]:
    """A journal's records by their numbers."""
    if entry is None:
        return {}
    return {entry.start + index: text for index, text in enumerate(entry.records)}


class SegmentWriter:
    """One writer's segments: what its bases name, and the appends of new ones."""

    def __init__(self, store: JournalStore, checkpoint_key: str) -> None:
        self.store = store
        self.key = segments_journal_key(checkpoint_key)
        self.lists: Named = {}
        self._version: str | None = None
        self._end: int | None = None  # the next record's number; None: read it first

    def adopt(self, named: Named) -> None:
        """Name again the segments a load found (a restored run's base need not rewrite them)."""
        self.lists = dict(named)

    async def placeholders(self, wire: dict[str, Any]) -> tuple[dict[Path, Any], int]:
        """What a base holds instead of each long list of ``wire`` (by the list's path), new
        segments written first; and the bytes of the segments named."""
        plan: list[tuple[Place, list[SegmentRef], list[Any], str | None]] = []
        named_bytes = 0
        for place in places(wire):
            items = place.container.get(place.field)
            if place.list_id is None or not isinstance(items, list) or not items:
                continue
            kept, cursor = [], 0
            for ref in self.lists.get(place.list_id, ()):
                chunk = items[cursor : cursor + ref.items]
                old = jsonutil.dumps(chunk) if len(chunk) == ref.items else ""
                if not old or chain.digest(old) != ref.digest:
                    break  # changed (a context rewrite, a task started again): new ones
                kept.append(ref)
                cursor += ref.items
                named_bytes += len(old)
            new = items[cursor:]
            text: str | None = jsonutil.dumps(new) if new else None
            if text is not None and len(text) < MIN_SEGMENT_BYTES:
                text = None  # too few bytes for a segment of their own: kept in the base
            else:
                new = []
            if kept or text is not None:
                plan.append((place, kept, new, text))
        texts = [text for *_, text in plan if text is not None]
        first = await self._append(texts) if texts else 0
        out: dict[Path, Any] = {}
        lists: Named = {}
        for place, kept, rest, text in plan:
            if text is not None:
                count = len(place.container[place.field]) - sum(ref.items for ref in kept)
                kept.append(SegmentRef(first, chain.digest(text), count))
                first += 1
                named_bytes += len(text)
            assert place.list_id is not None
            lists[place.list_id] = tuple(kept)
            out[place.path] = {MARK: [list(ref) for ref in kept], "rest": rest}
        self.lists = lists
        return out, named_bytes

    async def _append(self, texts: list[str]) -> int:
        """Append ``texts``; the first one's number. Another writer's append in between
        (an attempt that lost the run, whose base will not be read) is read past."""
        for _ in range(_WRITE_TRIES):
            if self._end is None:
                head = await self.store.journal_head(self.key)
                self._version = head.version if head is not None else None
                self._end = head.base + head.records if head is not None else 0
            version = new_version()
            try:
                ok = await self.store.journal_write(
                    self.key,
                    texts,
                    version=version,
                    expected=self._version,
                    replace=self._version is None,
                )
            except Exception:
                self._end = None  # it may have landed: numbers are read again
                raise
            if ok:
                first, self._version, self._end = self._end, version, self._end + len(texts)
                return first
            self._end = None
        raise CheckpointFencedError(self.key, None)
