"""Segments: the long lists of a journal's bases, written once and named by every later base.

A task's conversation only grows, and so do its tool calls: an item once written never changes
(and a completed task's result, messages and calls included, not at all). A writer that keeps
history (``oma.checkpoint.journal``) writes those lists' items, as they accumulate, into
*segment records* of a second journal beside the checkpoint
(``__oma_checkpoint__/<runId>/segments``), and a base names the last of them instead of
repeating the list:

    {"conversationMessages": {"$segments": [number, digest, items], "rest": [...]}}

A segment record is a header line, ``{"prev": [number, digest] | null, "items": n}``, then a
JSON array of its ``n`` items: each names the one before it in its list, so a base names a
list of any length in a few dozen bytes and stays the size of the run's small state. Compacting
often then costs little, and a restore reads a short tail of deltas plus the segments, parsed
as one JSON array: time in proportion to bytes, not to operations. The base is chained (its
header seals its body) and each segment names its predecessor's digest, so what a base names
vouches for every segment before it: a changed, lost or foreign segment is refused
(``CheckpointDecodeError`` naming it), never read. Segments no base names (a writer that lost a
race, a task that ended) stay until the checkpoint is deleted.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

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


class SegmentError(ValueError):
    """What is wrong with one segment a base names: ``number`` is the segment's (a reader of
    the history names it once, not again at every base that leads to it)."""

    def __init__(self, number: int, problem: str) -> None:
        super().__init__(problem)
        self.number = number


class SegmentRef(NamedTuple):
    """A segment: its number in the segments journal, its record's digest, its items."""

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
    """Every place of ``document`` whose list may be kept as segments. A list id found at two
    places (two results of one task id: the engine writes one, a patch or another process may
    write more) names neither: such lists stay whole, as a writer naming one segment from both
    would write a base no reader accepts."""
    found = _places(document)
    ids = Counter(place.list_id for place in found)
    return [place if ids[place.list_id] == 1 else place._replace(list_id=None) for place in found]


def _places(document: Any) -> list[Place]:
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


def _named(value: dict[str, Any]) -> tuple[tuple[int, str, int] | None, list[Any]]:
    """The last segment a base's placeholder names (number, digest, the list's items in
    segments), and its rest; ``ValueError`` if malformed."""
    if set(value) != {MARK, "rest"}:
        raise ValueError(f"a list replaced by segments holds {MARK!r} and 'rest' only")
    last, rest = value[MARK], value["rest"]
    if not isinstance(rest, list):
        raise ValueError("'rest' is a list")
    if last is None:
        return None, rest
    if not (isinstance(last, list) and len(last) == 3):
        raise ValueError("a list's segments are named by [number, digest, items]")
    number, digest, items = last
    valid = type(number) is int and number >= 0 and type(items) is int and items >= 1
    if not valid or not _is_digest(digest):
        raise ValueError("a list's segments are named by [number, digest, items]")
    return (number, digest, items), rest


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == chain.DIGEST_CHARS


def _walk(last: tuple[int, str, int], texts: Mapping[int, str]) -> list[tuple[SegmentRef, bytes]]:
    """The segments of one list, first to last, each with its items' text (UTF-8), followed
    back from the last one its base names; ``ValueError`` names one missing, changed or
    malformed."""
    out: list[tuple[SegmentRef, bytes]] = []
    number, digest, total = last
    link: tuple[int, str] | None = (number, digest)
    seen: set[int] = set()
    while link is not None:
        number, digest = link
        if number in seen:
            raise SegmentError(number, f"segment {number} is named twice")
        seen.add(number)
        link, items, body = _read((number, digest), texts)
        out.append((SegmentRef(number, digest, items), body))
    out.reverse()
    if sum(ref.items for ref, _ in out) != total:
        raise SegmentError(
            last[0], f"the segments ending at segment {last[0]} do not hold {total} items"
        )
    return out


def _read(
    link: tuple[int, str], texts: Mapping[int, str]
) -> tuple[tuple[int, str] | None, int, bytes]:
    """The segment ``link`` names, if it is the text named: its link to the one before it, its
    count of items and their text as UTF-8 (encoded once: for the digest, then the parse);
    ``ValueError`` says what is wrong with it."""
    number, digest = link
    text = texts.get(number)
    if text is None:
        raise SegmentError(number, f"segment {number}, which it names, is missing from the store")
    raw = chain.encoded(text)
    if chain.digest_of_bytes(raw) != digest:
        raise SegmentError(number, f"segment {number} changed since it was named")
    end = raw.find(b"\n")
    link_before, items = _header(number, raw[:end] if end >= 0 else b"")
    return link_before, items, raw[end + 1 :] if end >= 0 else raw


def _header(number: int, line: str | bytes) -> tuple[tuple[int, str] | None, int]:
    try:  # two small numbers and a digest: what orjson cannot read exactly is refused
        header = orjson.loads(line)
    except orjson.JSONDecodeError:
        header = None
    if not (isinstance(header, dict) and set(header) == {"prev", "items"}):
        raise SegmentError(number, f"segment {number} has no header")
    prev, items = header["prev"], header["items"]
    if not (type(items) is int and items >= 1):
        raise SegmentError(number, f"segment {number} does not say how many items it holds")
    if prev is None:
        return None, items
    named = isinstance(prev, list) and len(prev) == 2 and type(prev[0]) is int
    if not (named and prev[0] >= 0 and _is_digest(prev[1])):
        raise SegmentError(number, f"segment {number} does not name the one before it")
    return (prev[0], prev[1]), items


def record(prev: SegmentRef | None, items: int, body: str) -> str:
    """A segment record's text."""
    link = [prev.number, prev.digest] if prev is not None else None
    return jsonutil.dumps({"prev": link, "items": items}) + "\n" + body


def _placeholders(document: Any) -> list[tuple[Place, dict[str, Any]]]:
    """Each place of a base whose list is replaced by segments, and what stands there."""
    return [
        (place, place.container[place.field])
        for place in places(document)
        if isinstance(place.container.get(place.field), dict)
    ]


def named_numbers(document: Any) -> set[int]:
    """The last segment numbers a base names (malformed placeholders are left to
    ``resolve``)."""
    numbers: set[int] = set()
    for _, value in _placeholders(document):
        try:
            last = _named(value)[0]
        except ValueError:
            continue
        if last is not None:
            numbers.add(last[0])
    return numbers


def resolve(
    document: Any, texts: Mapping[int, str] | None, depth_limit: int | None = None
) -> tuple[Named, bool]:
    """Put back, in place, each list a base names by segments; the segments found per list,
    and whether every segment is known to nest within ``depth_limit`` (for the list's place).
    ``ValueError`` names a segment that is missing, changed or not its items."""
    found = []
    seen: set[int] = set()
    for place, value in _placeholders(document):
        last, rest = _named(value)
        walked = _walk(last, texts or {}) if last is not None else []
        numbers = {ref.number for ref, _ in walked}
        if numbers & seen:
            # a writer names each segment once: two lists sharing one could make a small store
            # answer into a huge document
            raise ValueError("it names a segment twice")
        seen |= numbers
        found.append((place, walked, rest))
    bodies = [body for _, walked, _ in found for _, body in walked]
    chunks, within = _parsed(bodies, depth_limit)
    at = 0
    named: Named = {}
    for place, walked, rest in found:
        items: list[Any] = []
        for (ref, _), chunk in zip(walked, chunks[at : at + len(walked)], strict=True):
            if not isinstance(chunk, list) or len(chunk) != ref.items:
                raise SegmentError(
                    ref.number, f"segment {ref.number} does not hold the {ref.items} items it says"
                )
            items.extend(chunk)
        at += len(walked)
        items.extend(rest)
        place.container[place.field] = items
        if place.list_id is not None:
            named[place.list_id] = tuple(ref for ref, _ in walked)
    return named, within and depth_limit is not None


def check(
    document: Any, texts: Mapping[int, str], known: dict[tuple[int, str], int] | None = None
) -> dict[int, str]:
    """What is wrong with the segments a base names, by number (empty: each is what it says):
    the first one found wrong on each list's way back from its last. ``known`` (shared by the
    bases of one history) holds each segment already found right, with the items up to it, so
    a chain is walked only back to where an earlier base's walk reached: each segment is
    hashed and parsed once per history, however many bases name it."""
    known = {} if known is None else known
    bad: dict[int, str] = {}
    for _, value in _placeholders(document):
        try:
            last = _named(value)[0]
        except ValueError:
            continue  # the base's own fault: its assembly names it
        if last is None:
            continue
        chain_back: list[tuple[tuple[int, str], int]] = []
        link: tuple[int, str] | None = (last[0], last[1])
        below, failed = 0, False
        while link is not None:
            if link in known:
                below = known[link]
                break
            if any(link[0] == number for (number, _), _ in chain_back):
                bad.setdefault(link[0], f"segment {link[0]} is named twice")
                failed = True
                break
            problem, items, before = _checked(link, texts)
            if problem is not None:
                bad.setdefault(link[0], problem)
                failed = True
                break
            chain_back.append((link, items))
            link = before
        if failed:
            continue
        for found, items in reversed(chain_back):
            below += items
            known[found] = below
        if below != last[2]:
            problem = f"the segments ending at segment {last[0]} do not hold {last[2]} items"
            bad.setdefault(last[0], problem)
    return bad


def _checked(
    link: tuple[int, str], texts: Mapping[int, str]
) -> tuple[str | None, int, tuple[int, str] | None]:
    """One segment checked: what is wrong with it (``None``: nothing), its items, the link
    before it."""
    try:
        before, items, body = _read(link, texts)
        chunk = jsonutil.loads(body)
    except ValueError as exc:
        return str(exc), 0, None
    if not isinstance(chunk, list) or len(chunk) != items:
        return f"segment {link[0]} does not hold the {items} items it says", 0, None
    return None, items, before


def _parsed(texts: list[bytes], depth_limit: int | None) -> tuple[list[Any], bool]:
    """Every segment parsed in one call (the depth bound costs one padding, not one per
    segment), and whether each is known to nest within its place under ``depth_limit``.
    ``ValueError`` unless the texts join into that many JSON values. The joined parse cannot
    tell where one text ends: texts a forged base vouches for could move items between its own
    segments (each segment's count is still checked), nothing the forger could not write into
    the base itself."""
    if not texts:
        return [], True
    joined = b"[" + b",".join(texts) + b"]"
    try:
        if depth_limit is None:
            values, within = jsonutil.loads(joined), False
        else:  # the joined list is one level above each segment's place
            values, within = jsonutil.loads_within(joined, depth_limit - _LEVELS_ABOVE + 1)
    except ValueError as exc:
        raise ValueError(f"a segment it names is not JSON ({exc})") from exc
    if not isinstance(values, list) or len(values) != len(texts):
        raise ValueError("the segments named are not one JSON array each")
    return values, within


class Unread(enum.Enum):
    """``read_named``'s plain read, not asked for yet."""

    UNREAD = enum.auto()


async def read_named(
    store: JournalStore,
    key: str,
    base: str,
    read: JournalEntry | BaseException | Unread | None = Unread.UNREAD,
) -> dict[int, str] | None:
    """The segment records a base (a record's text) names, read from the checkpoint ``key``'s
    segments journal, by number (``None``: it names none). A plain read first (``read``: its
    answer, already asked for beside the checkpoint's own journal); the history only when a
    segment it leads to lies before the segments journal's own base, or was appended after
    that plain read."""
    body = chain.body(base)
    if MARK not in body:
        return None
    try:
        document = jsonutil.loads(body)
    except ValueError:
        return None  # the assembly names what is wrong with the base
    if not named_numbers(document):
        return None
    side = segments_journal_key(key)
    if isinstance(read, BaseException):
        raise read
    texts = by_number(await store.journal_get(side) if read is Unread.UNREAD else read)
    if not _all_there(document, texts):
        texts = by_number(await store.journal_get(side, history=True))
    return texts


def _all_there(document: Any, texts: Mapping[int, str]) -> bool:
    """Whether every segment each list leads to is among ``texts`` (links followed by the
    headers alone: ``resolve`` checks the rest)."""
    visited: set[int] = set()  # across lists: a forged base cannot make the walk quadratic
    for _, value in _placeholders(document):
        try:
            last = _named(value)[0]
        except ValueError:
            continue
        link = (last[0], last[1]) if last is not None else None
        while link is not None and link[0] not in visited:
            visited.add(link[0])
            text = texts.get(link[0])
            if text is None:
                return False
            end = text.find("\n")
            try:
                link = _header(link[0], text[:end] if end >= 0 else "")[0]
            except ValueError:
                break
    return True


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

    def forget(self) -> None:
        """Name none of the segments written so far: the next base writes its lists again (a
        journal replaced, perhaps after a delete took the segments journal with it)."""
        self.lists, self._version, self._end = {}, None, None

    async def placeholders(self, wire: dict[str, Any]) -> tuple[dict[Path, Any], int]:
        """What a base holds instead of each long list of ``wire`` (by the list's path), new
        segments written first; and the bytes of the segments named."""
        if self._end is None:
            await self._read_head()
        plan: list[tuple[Place, list[SegmentRef], list[Any], str | None]] = []
        named_bytes = 0
        for place in places(wire):
            items = place.container.get(place.field)
            if place.list_id is None or not isinstance(items, list) or not items:
                continue
            kept: list[SegmentRef] = []
            cursor = 0
            for ref in self.lists.get(place.list_id, ()):
                chunk = items[cursor : cursor + ref.items]
                old = jsonutil.dumps(chunk) if len(chunk) == ref.items else ""
                prev = kept[-1] if kept else None
                if not old or chain.digest(record(prev, ref.items, old)) != ref.digest:
                    break  # changed (a task started over): its segments from here are new
                kept.append(ref)
                cursor += ref.items
                named_bytes += len(old)
            new = items[cursor:]
            body: str | None = jsonutil.dumps(new) if new else None
            if body is not None and len(body) < MIN_SEGMENT_BYTES:
                body = None  # too few bytes for a segment of their own: kept in the base
            else:
                new = []
            if kept or body is not None:
                plan.append((place, kept, new, body))
        texts = [
            record(kept[-1] if kept else None, len(place.container[place.field]) - cursor, body)
            for place, kept, _, body in plan
            if body is not None
            for cursor in [sum(ref.items for ref in kept)]
        ]
        first = await self._append(texts) if texts else 0
        out: dict[Path, Any] = {}
        lists: Named = {}
        written = iter(texts)
        for place, kept, rest, body in plan:
            if body is not None:
                text = next(written)
                count = len(place.container[place.field]) - sum(ref.items for ref in kept)
                kept.append(SegmentRef(first, chain.digest(text), count))
                first += 1
                named_bytes += len(body)
            assert place.list_id is not None
            lists[place.list_id] = tuple(kept)
            total = sum(ref.items for ref in kept)
            last = [kept[-1].number, kept[-1].digest, total] if kept else None
            out[place.path] = {MARK: last, "rest": rest}
        self.lists = lists
        return out, named_bytes

    async def _append(self, texts: list[str]) -> int:
        """Append ``texts``; the first one's number. Another writer's append in between
        (an attempt that lost the run, whose base will not be read) is read past."""
        for _ in range(_WRITE_TRIES):
            if self._end is None:
                await self._read_head()
            assert self._end is not None
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

    async def _read_head(self) -> None:
        """Where the next segment goes. No segments journal while this writer names segments
        (a delete took it): it names none, and the next base writes its lists again."""
        head = await self.store.journal_head(self.key)
        if head is None and self.lists:
            self.lists = {}
        self._version = head.version if head is not None else None
        self._end = head.base + head.records if head is not None else 0
