"""Making deltas (``oma.checkpoint.delta``): the operations between two successive snapshots.

The diff is cheap where a snapshot is: parts that are the same object as before (the snapshot
encoder's caches) cost one identity check, a list that grew costs an identity comparison of its
old items (C speed), and only what changed is encoded. What is already in the document is not
written again but copied:

- items appended in this delta at one place and again at another (a message appended to a
  conversation and to its tail): ``c``;
- a long run of items of a list of the previous snapshot (a task's result made from its
  in-flight conversation): ``o``;
- an object or list written by this delta or the previous one, equal to one being written (a
  tool call's record, written when it is committed and again as the turn's ``toolCalls``
  entry; its result, again inside the ``tool_result`` message): ``v`` and ``w``.

``DeltaEncoder`` keeps, between two deltas, where the values it wrote last time are; a copy is
only ever made from a value it finds at that place in the old document (by identity).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterator
from typing import Any

import orjson

from oma.checkpoint.delta import Op, Path

_MIN_VALUE = 64  # encoded bytes below which a value is written out: a copy is about as long
_MIN_RUN = 8  # items of an old list that a run must match to be copied from it
_DEPTH = 4  # levels below a written value that are looked at for copies


class AppendedList(list[Any]):
    """A list its producer made by appending to ``previous``, a list it handed out before:
    the items of ``previous`` are the first items of this one, the same objects. A diff against
    that list then costs what was appended, not an identity check of every item (a
    conversation of thousands of messages at every boundary). Held weakly: no chain of lists."""

    __slots__ = ("__weakref__", "_previous")

    def __init__(self, items: list[Any], previous: list[Any] | None = None) -> None:
        super().__init__(items)
        self._previous = None if previous is None else weakref.ref(previous)

    def extends(self, old: list[Any]) -> bool:
        return self._previous is not None and self._previous() is old and len(self) >= len(old)


class DeltaEncoder:
    """The deltas of one writer's successive documents (each document is never changed once
    given: the next diff compares against it, and copies from it by identity)."""

    def __init__(self) -> None:
        self._recent: dict[bytes, tuple[Path, Any]] = {}

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> list[Op]:
        """Operations turning ``old`` into ``new`` (JSON objects of plain dicts and lists)."""
        if not isinstance(old, dict) or not isinstance(new, dict):
            raise TypeError("diff works on JSON objects at the root")
        differ = _Differ(old, self._recent)
        differ.dicts(old, new, [])
        self._recent = differ.written
        return differ.ops


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Op]:
    """One delta, without a previous one to copy from."""
    return DeltaEncoder().diff(old, new)


class _Differ:
    def __init__(self, old_root: dict[str, Any], previous: dict[bytes, tuple[Path, Any]]) -> None:
        self.old_root = old_root
        self.previous = previous  # values the previous delta wrote, by encoding
        self.ops: list[Op] = []
        self.written: dict[bytes, tuple[Path, Any]] = {}  # values this delta writes whole
        self.placed: dict[int, tuple[Path, int, Any]] = {}  # items appended, by identity
        self._encoded: dict[int, bytes | None] = {}
        self._parts: dict[int, bool] = {}
        self._plans: dict[tuple[int, tuple[str | int, ...], int], tuple[int, str]] = {}
        self._sources: list[tuple[Path, list[Any]]] | None = None
        self._skeletons: dict[tuple[int, tuple[str | int, ...]], tuple[int, Any, list[Any]]] = {}
        self._inside: dict[bytes, tuple[int, Path]] | None = None  # parts of the value emitted
        self._order: dict[tuple[str | int, ...], int] = {}

    # Walking both documents.

    def dicts(self, old: dict[str, Any], new: dict[str, Any], path: Path) -> None:
        old_keys, new_keys = list(old), list(new)
        common = len(new_keys)
        if old_keys != new_keys:
            # Other keys or another order: keep the order exact by setting everything from the
            # first differing key on (a key added or dropped at the end is the usual case).
            common = 0
            for a, b in zip(old_keys, new_keys, strict=False):
                if a != b:
                    break
                common += 1
        for key in new_keys[:common]:
            if old[key] is not new[key]:
                self.value(old[key], new[key], [*path, key])
        for key in old_keys[common:]:
            self.ops.append(["d", [*path, key]])
        for key in new_keys[common:]:
            self.emit(new[key], [*path, key])

    def value(self, old: Any, new: Any, path: Path) -> None:
        if old is new:
            return
        if isinstance(old, dict) and isinstance(new, dict):
            self.dicts(old, new, path)
        elif isinstance(old, list) and isinstance(new, list):
            self.lists(old, new, path)
        elif not _same(old, new):
            self.emit(new, path)

    def lists(self, old: list[Any], new: list[Any], path: Path) -> None:
        n = len(old)
        grew = type(new) is AppendedList and new.extends(old)
        if grew or (len(new) >= n and all(map(operator.is_, old, new))):  # the usual case
            if len(new) > n:
                self.extend(new, n, path)
            return
        common = 0
        for a, b in zip(old, new, strict=False):
            if not _same(a, b):
                break
            common += 1
        if common == n:
            self.extend(new, n, path)
        elif len(new) < n and common == len(new):
            self.ops.append(["t", path, len(new)])
        elif _cheap_in_place(old, new, common, min(n, len(new))):
            for index in range(common, min(n, len(new))):
                self.value(old[index], new[index], [*path, index])
            if len(new) < n:
                self.ops.append(["t", path, len(new)])
            elif len(new) > n:
                self.extend(new, n, path)
        else:
            self.emit(new, path)

    # Writing what is new.

    def extend(self, new: list[Any], start: int, path: Path) -> None:
        """Append ``new[start:]`` to the list at ``path`` (which holds ``new[:start]``)."""
        index = start
        pending: list[Any] = []

        def flush() -> None:
            if pending:
                self.ops.append(["x", path, list(pending)])
                pending.clear()

        while index < len(new):
            item = new[index]
            run = self._copy_run(new, index, path)
            if run is not None:
                flush()
                kind, source, first, length = run
                self.ops.append([kind, path, source, first, first + length])
                for offset in range(length):
                    self._place(new[index + offset], path, index + offset)
                index += length
                continue
            here = [*path, index]
            if self._plan(item, here, _length(here))[1] != "whole":
                flush()
                self.emit(item, here)  # an index equal to the length appends
            else:
                pending.append(item)
                self._remember(item, here)
            self._place(item, path, index)
            index += 1
        flush()

    def emit(self, value: Any, path: Path, path_bytes: int | None = None) -> None:
        """Set ``path`` to ``value``, copying what of it the document already holds where
        that takes fewer bytes than writing it. ``path_bytes``: what the operation's path
        costs (a path that shares its start with the one before is written short)."""
        if self._inside is not None:
            self._emit(value, path, path_bytes)
            return
        # Parts of ``value`` may repeat an earlier part of it (a tool's output, its result's
        # content): the operations run in the value's order, so a later part can copy an
        # earlier one once that is written.
        self._inside, self._order = {}, {}
        self._index(value, path, _DEPTH)
        try:
            self._emit(value, path, path_bytes)
        finally:
            self._inside, self._order = None, {}

    def _emit(self, value: Any, path: Path, path_bytes: int | None) -> None:
        if path_bytes is None:
            path_bytes = _length(path)
        choice = self._plan(value, path, path_bytes)[1]
        if choice == "ref":
            reference = self._reference(value, path)
            assert reference is not None
            self.ops.append([reference[0], path, reference[1]])
        elif choice == "split" and isinstance(value, list):
            self.ops.append(["s", path, []])
            self.extend(value, 0, path)
            return
        elif choice == "skeleton":
            # The value with null where a part is copied (keys keep their order, items their
            # place), then each copy set there, in the value's order.
            _, shape, parts = self._skeleton(value, path, len(path), _DEPTH - 1)
            self.ops.append(["s", path, shape])
            for here, part in parts:
                self._emit(part, here, _length(here[len(path) :]) + 2)
        else:
            self.ops.append(["s", path, value])
        self._remember(value, path)

    def _index(self, value: Any, path: Path, depth: int) -> None:
        """Number the parts of a value being written in the order its operations write them."""
        self._order[tuple(path)] = len(self._order)
        if depth <= 0 or not isinstance(value, dict | list):
            return
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, dict | list) or _long_text(item):
                here = [*path, key]
                encoded = self._encoding(item)
                if encoded is not None and self._inside is not None:
                    self._inside.setdefault(encoded, (len(self._order), here))
                self._index(item, here, depth - 1)

    def _plan(
        self, value: Any, path: Path, path_bytes: int, depth: int = _DEPTH
    ) -> tuple[int, str]:
        """The cheapest way to write ``value`` at ``path`` (estimated bytes): whole, as a
        reference, as a skeleton with copied parts, or split into items (lists)."""
        key = (id(value), tuple(path), path_bytes)
        planned = self._plans.get(key)
        if planned is not None:
            return planned
        whole = self._size(value) + path_bytes + 8
        best = (whole, "whole")
        reference = self._reference(value, path)
        if reference is not None:
            best = min(best, (path_bytes + _relative_length(reference[1], path) + 8, "ref"))
        if depth > 0 and isinstance(value, dict | list) and self._has_parts(value, path):
            skeleton = path_bytes + 8 + self._skeleton(value, path, len(path), depth - 1)[0]
            best = min(best, (skeleton, "skeleton"))
            if isinstance(value, list):
                split = path_bytes + 10
                run = self._copy_run(value, 0, None)
                covered = run[3] if run is not None else 0
                if run is not None:
                    split += 12 + _relative_length(run[1], path) + 16
                for index in range(covered, len(value)):
                    item = value[index]
                    child = self._plan(item, [*path, index], 12, depth - 1)
                    split += min(self._size(item) + 1, child[0])
                best = min(best, (split, "split"))
        self._plans[key] = best
        return best

    def _skeleton(
        self, value: dict[str, Any] | list[Any], path: Path, root: int, depth: int
    ) -> tuple[int, Any, list[tuple[Path, Any]]]:
        """``value`` with null where a part is cheaper written by an operation of its own (a
        copy; at any depth down to ``depth``), what that and those operations cost, and those
        parts with their paths, in the value's order. ``root``: the length of the path of the
        operation that writes the skeleton."""
        key = (id(value), tuple(path))
        known = self._skeletons.get(key)
        if known is not None:
            return known
        items = value.items() if isinstance(value, dict) else enumerate(value)
        cost, copies = 2, []
        shape: dict[str, Any] | list[Any] = {} if isinstance(value, dict) else []
        for name, item in items:
            here = [*path, name]
            cost += len(name) + 4 if isinstance(name, str) else 1
            best: tuple[int, Any, list[tuple[Path, Any]]] = (self._size(item), item, [])
            if isinstance(item, dict | list) or _long_text(item):
                # Null here, and the part written by an operation of its own: a copy, or a list
                # holding a run of copied items.
                own = self._plan(item, here, _length(here[root:]) + 2, depth)
                if own[1] != "whole":
                    best = min(best, (4 + own[0], None, [(here, item)]), key=_cost)
                if depth > 0 and isinstance(item, dict | list) and self._has_parts(item, here):
                    best = min(best, self._skeleton(item, here, root, depth - 1), key=_cost)
            cost += best[0]
            copies.extend(best[2])
            if isinstance(shape, dict):
                shape[str(name)] = best[1]
            else:
                shape.append(best[1])
        known = (cost, shape, copies)
        self._skeletons[key] = known
        return known

    def _size(self, value: Any) -> int:
        encoded = self._encoding(value, minimum=0)
        return len(encoded) if encoded is not None else 1 << 30

    # What can be copied.

    def _reference(self, value: Any, path: Path | None = None) -> tuple[str, Path] | None:
        """``("v", path)`` for a value this delta wrote (or an earlier part of the value being
        written at ``path``), ``("w", path)`` for one the previous delta wrote and that is
        still there in the old document."""
        encoded = self._encoding(value)
        if encoded is None:
            return None
        now = self.written.get(encoded)
        if now is not None:
            return "v", now[0]
        before = self.previous.get(encoded)
        if before is not None and _at(self.old_root, before[0]) is before[1]:
            return "w", before[0]
        if path is not None and self._inside:
            earlier = self._inside.get(encoded)
            order = self._order.get(tuple(path))
            # Never a later part, nor a copy of its own ancestor.
            before_it = earlier is not None and order is not None and earlier[0] < order
            if before_it and earlier is not None and earlier[1] != path[: len(earlier[1])]:
                return "v", earlier[1]
        return None

    def _has_parts(self, value: Any, path: Path, depth: int = _DEPTH) -> bool:
        """Whether some part of ``value`` (not itself) can be copied."""
        if not isinstance(value, dict | list) or depth <= 0:
            return False
        known = self._parts.get(id(value))
        if known is None:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            known = any(
                self._reference(item, [*path, key]) is not None
                or self._has_parts(item, [*path, key], depth - 1)
                for key, item in items
                if isinstance(item, dict | list) or _long_text(item)
            ) or (isinstance(value, list) and self._copy_run(value, 0, None) is not None)
            self._parts[id(value)] = known
        return known

    def _remember(self, value: Any, path: Path, depth: int = _DEPTH) -> None:
        """Record where a value written whole (and its parts) now is."""
        if depth <= 0 or not (isinstance(value, dict | list) or _long_text(value)):
            return
        encoded = self._encoding(value)
        if encoded is not None:
            self.written.setdefault(encoded, (path, value))
        if isinstance(value, str):
            return
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, dict | list) or _long_text(item):
                self._remember(item, [*path, key], depth - 1)

    def _encoding(self, value: Any, minimum: int = _MIN_VALUE) -> bytes | None:
        """``value``'s JSON, for objects, lists and strings of at least ``minimum`` bytes (the
        smaller ones are never copied); other scalars only with ``minimum=0``."""
        if not isinstance(value, dict | list | str):
            if minimum > 0:
                return None
            try:
                return orjson.dumps(value)
            except (TypeError, orjson.JSONEncodeError):
                return None
        key = id(value)
        if key not in self._encoded:
            try:
                self._encoded[key] = orjson.dumps(value)
            except (TypeError, orjson.JSONEncodeError):
                self._encoded[key] = None  # not encodable as is: never assumed equal
        encoded = self._encoded[key]
        return encoded if encoded is not None and len(encoded) >= minimum else None

    def _place(self, item: Any, path: Path, index: int) -> None:
        if isinstance(item, dict):
            self.placed[id(item)] = (path, index, item)

    def _copy_run(
        self, new: list[Any], index: int, path: Path | None
    ) -> tuple[str, Path, int, int] | None:
        """A run of items from ``new[index]`` already in the document: appended earlier in
        this delta (one is enough: the same objects), or equal to ``_MIN_RUN`` or more items
        of a list of the old document."""
        if index >= len(new) or not isinstance(new[index], dict):
            return None
        first = new[index]
        known = self.placed.get(id(first))
        if known is not None and known[2] is first and known[0] != path:
            source, start, _ = known
            length = 1
            while index + length < len(new):
                again = self.placed.get(id(new[index + length]))
                if again is None or again[0] != source or again[1] != start + length:
                    break
                length += 1
            return "c", source, start, length
        if len(new) - index < _MIN_RUN:
            return None
        for source, items in self._old_lists():
            found = _find(items, first)
            if found is None:
                continue
            length = 1
            while index + length < len(new) and found + length < len(items):
                if not _same(items[found + length], new[index + length]):
                    break
                length += 1
            if length >= _MIN_RUN:
                return "o", source, found, length
        return None

    def _old_lists(self) -> Iterator[tuple[Path, list[Any]]]:
        """Long lists of objects in the old document, a few levels deep."""
        if self._sources is None:
            self._sources = []
            for key, value in self.old_root.items():
                self._sources.extend(_lists_of_objects(value, [key], depth=3))
        yield from self._sources


def _cost(option: tuple[int, Any, Any]) -> int:
    return option[0]


def _long_text(value: Any) -> bool:
    """A string long enough that copying it beats writing it (a tool's output, again)."""
    return isinstance(value, str) and len(value) >= _MIN_VALUE


def _relative_length(source: Path, path: Path) -> int:
    """About the bytes of ``source`` written relative to ``path`` (``oma.checkpoint.delta``)."""
    keep = 0
    for a, b in zip(source, path, strict=False):
        if a != b or type(a) is not type(b):
            break
        keep += 1
    return _length(source[keep:]) + (2 if keep else 0)


def _length(path: Path) -> int:
    """About the bytes of ``path`` in JSON."""
    return 2 + sum(len(step) + 3 if isinstance(step, str) else 3 for step in path)


def _at(doc: Any, path: Path) -> Any:
    node = doc
    for step in path:
        in_dict = isinstance(node, dict) and isinstance(step, str) and step in node
        if not in_dict and not (isinstance(node, list) and type(step) is int):
            return None
        if not in_dict and not 0 <= int(step) < len(node):
            return None
        node = node[step]
    return node


def _find(items: list[Any], first: Any) -> int | None:
    for position, item in enumerate(items):
        if item is first:
            return position
    for position, item in enumerate(items):
        if _same(item, first):
            return position
    return None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``==`` holds for ``True`` and ``1``, or ``1`` and ``1.0``, whose
    JSON differs; the encoded text decides where ``==`` cannot."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    if not isinstance(a, dict | list):
        return True
    try:
        return orjson.dumps(a) == orjson.dumps(b)
    except (TypeError, orjson.JSONEncodeError):
        return False


def _lists_of_objects(value: Any, path: Path, depth: int) -> Iterator[tuple[Path, list[Any]]]:
    if depth < 0:
        return
    if isinstance(value, list):
        if len(value) >= _MIN_RUN and isinstance(value[0], dict):
            yield path, value
        for index, item in enumerate(value):
            if isinstance(item, dict | list):
                yield from _lists_of_objects(item, [*path, index], depth - 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list):
                yield from _lists_of_objects(item, [*path, key], depth - 1)


def _cheap_in_place(old: list[Any], new: list[Any], start: int, stop: int) -> bool:
    """Whether to patch items ``start:stop`` in place (objects and lists that changed inside,
    a few at most) rather than set the list again."""
    if stop - start > 8:
        return False
    return all(
        isinstance(old[i], dict | list) and type(old[i]) is type(new[i]) for i in range(start, stop)
    )
