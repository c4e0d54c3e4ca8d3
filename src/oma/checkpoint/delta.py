"""Deltas between two JSON documents: what a journal record holds instead of a whole snapshot.

``diff(old, new)`` gives a list of operations that turns a deep copy of ``old`` into ``new``
(equal, and with the same key order, so both encode to the same text); ``apply(doc, ops)``
performs them. Operations, each a JSON array whose first element names it:

- ``["s", path, value]``: set the value at ``path`` (a dict key, or a list index; an index equal
  to the list's length appends);
- ``["d", path]``: delete a dict key;
- ``["x", path, items]``: extend the list at ``path`` with ``items``;
- ``["t", path, n]``: truncate the list at ``path`` to ``n`` items;
- ``["c", path, source, start, stop]``: extend the list at ``path`` with copies of
  ``source[start:stop]``, ``source`` being a list's path in the document as it is when this
  operation runs.

A path is a list of dict keys and list indices from the root. The diff is cheap where a
snapshot is: parts that are the same object as before (the encoder's caches) cost one identity
check, lists that grew cost a comparison of their common prefix (C speed, identity first), and
a message appended to a conversation and to its tail in one step is written once, the second
time as a copy. A list that appears whole (a task's result made from its in-flight
conversation) is copied from a list of the old document when it starts with a run of that
list's items.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator
from typing import Any

import orjson

Path = list[str | int]
Op = list[Any]
_MIN_COPY = 2  # shorter runs are written out: a copy op is about as long as a small item


def diff(old: Any, new: Any) -> list[Op]:
    """Operations turning ``old`` into ``new`` (both plain JSON values: dict, list, scalars)."""
    ops: list[Op] = []
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise TypeError("diff works on JSON objects at the root")
    _Differ(old, ops).dicts(old, new, [])
    return ops


def apply(doc: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """Apply ``ops`` to ``doc`` in place (and return it). Raises ``ValueError`` on an
    operation that does not fit the document (a journal that does not belong to its base)."""
    for op in ops:
        try:
            _apply_one(doc, op)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"journal operation {str(op)[:120]} does not apply: {exc}") from exc
    return doc


def _apply_one(doc: dict[str, Any], op: Op) -> None:
    kind, path = op[0], op[1]
    if kind == "c":
        source = _at(doc, op[2])
        if not isinstance(source, list):
            raise TypeError("a copy source must be a list")
        items = copy.deepcopy(source[op[3] : op[4]])
        if len(items) != op[4] - op[3]:
            raise ValueError("the copy source is shorter than the copied range")
        _list_at(doc, path).extend(items)
        return
    if kind == "x":
        _list_at(doc, path).extend(op[2])
        return
    if kind == "t":
        target = _list_at(doc, path)
        if op[2] > len(target):
            raise ValueError("truncation past the list's end")
        del target[op[2] :]
        return
    parent = _at(doc, path[:-1])
    last = path[-1]
    if kind == "s":
        if isinstance(parent, list):
            if not isinstance(last, int) or not 0 <= last <= len(parent):
                raise IndexError(f"index {last!r} outside a list of {len(parent)}")
            if last == len(parent):
                parent.append(op[2])
            else:
                parent[last] = op[2]
        elif isinstance(parent, dict) and isinstance(last, str):
            parent[last] = op[2]
        else:
            raise TypeError("set on a value that is neither object nor list")
        return
    if kind == "d":
        if not isinstance(parent, dict):
            raise TypeError("delete from a value that is not an object")
        del parent[last]
        return
    raise ValueError(f"unknown operation {kind!r}")


def _at(doc: Any, path: Path) -> Any:
    node = doc
    for step in path:
        in_dict = isinstance(node, dict) and isinstance(step, str)
        if in_dict or (isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)):
            node = node[step]
        else:
            raise KeyError(f"path {path!r} does not exist")
    return node


def _list_at(doc: Any, path: Path) -> list[Any]:
    node = _at(doc, path)
    if not isinstance(node, list):
        raise TypeError(f"{path!r} is not a list")
    return node


class _Differ:
    def __init__(self, root: dict[str, Any], ops: list[Op]) -> None:
        self.root = root
        self.ops = ops
        # Items written in this delta, by identity: where they now are in the document.
        self.placed: dict[int, tuple[Path, int, Any]] = {}
        self._sources: list[tuple[Path, list[Any]]] | None = None
        self._visited: set[str] = set()  # top-level keys reached (their old lists may change)

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
            if not path:
                self._visited.add(key)
            if old[key] is not new[key]:
                self.value(old[key], new[key], [*path, key])
        if common == len(old_keys) == len(new_keys):
            return
        if not path:
            self._visited.update(old_keys[common:])
        for key in old_keys[common:]:
            self.ops.append(["d", [*path, key]])
        for key in new_keys[common:]:
            if not path:
                self._visited.add(key)
            self.whole(new[key], [*path, key])

    def value(self, old: Any, new: Any, path: Path) -> None:
        if old is new:
            return
        if isinstance(old, dict) and isinstance(new, dict):
            self.dicts(old, new, path)
        elif isinstance(old, list) and isinstance(new, list):
            self.lists(old, new, path)
        elif not _same(old, new):
            self.whole(new, path)

    def lists(self, old: list[Any], new: list[Any], path: Path) -> None:
        n = len(old)
        if len(new) >= n and all(map(operator.is_, old, new)):  # grew: the usual case, C speed
            if len(new) > n:
                self.extend(new, n, path)
            return
        common = 0
        for a, b in zip(old, new, strict=False):
            if not _same(a, b):
                break
            common += 1
        if common == n and len(new) >= n:
            self.extend(new, n, path)
            return
        if len(new) < n and common == len(new):
            self.ops.append(["t", path, len(new)])
            return
        changed = min(n, len(new))
        if _cheap_in_place(old, new, common, changed):
            for index in range(common, changed):
                self.value(old[index], new[index], [*path, index])
            if len(new) < n:
                self.ops.append(["t", path, len(new)])
            elif len(new) > n:
                self.extend(new, n, path)
            return
        self.whole(new, path)

    def extend(self, new: list[Any], start: int, path: Path) -> None:
        """Append ``new[start:]`` to the list at ``path`` (which holds ``new[:start]``)."""
        index = start
        pending: list[Any] = []
        while index < len(new):
            run = self._copy_run(new, index, path)
            if run is None and not self._holds_copies(new[index]):
                pending.append(new[index])
                self._place(new[index], path, index)
                index += 1
                continue
            if pending:
                self.ops.append(["x", path, pending])
                pending = []
            if run is None:
                self.whole(new[index], [*path, index])  # index == length: appends
                index += 1
                continue
            source, source_start, length = run
            self.ops.append(["c", path, source, source_start, source_start + length])
            for offset in range(length):
                self._place(new[index + offset], path, index + offset)
            index += length
        if pending:
            self.ops.append(["x", path, pending])

    def whole(self, new: Any, path: Path) -> None:
        """``new`` replaces what is at ``path``; parts of it that repeat a run of items already
        in the document are built from copies."""
        if isinstance(new, list) and self._holds_copies(new):
            self.ops.append(["s", path, []])
            self.extend(new, 0, path)
        elif isinstance(new, dict) and self._holds_copies(new):
            self.ops.append(["s", path, {}])
            for key, item in new.items():
                self.whole(item, [*path, key])
        else:
            self.ops.append(["s", path, new])

    def _place(self, item: Any, path: Path, index: int) -> None:
        if isinstance(item, dict):
            self.placed[id(item)] = (path, index, item)

    def _holds_copies(self, value: Any, depth: int = 3) -> bool:
        if depth < 0:
            return False
        if isinstance(value, list):
            if self._copy_run(value, 0, None) is not None:
                return True
            return any(
                isinstance(item, dict) and self._holds_copies(item, depth - 1)
                for item in value[:1]  # a list's items share a shape: the first tells
            )
        if isinstance(value, dict):
            return any(
                isinstance(item, dict | list) and self._holds_copies(item, depth - 1)
                for item in value.values()
            )
        return False

    def _copy_run(
        self, new: list[Any], index: int, path: Path | None
    ) -> tuple[Path, int, int] | None:
        """A run of items from ``new[index]`` already in the document: written earlier in
        this delta (one item is enough, it is the same object), or equal to a run of at least
        ``_MIN_COPY`` items of an old list not reached yet."""
        if index >= len(new) or not isinstance(new[index], dict):
            return None
        first = new[index]
        known = self.placed.get(id(first))
        if known is not None and known[2] is first and known[0] != path:
            source_path, source_index, _ = known
            length = 1
            while index + length < len(new):
                again = self.placed.get(id(new[index + length]))
                if again is None or again[0] != source_path or again[1] != source_index + length:
                    break
                length += 1
            return source_path, source_index, length
        if len(new) - index < _MIN_COPY:
            return None
        for source_path, items in self._old_lists():
            start = _find(items, first)
            if start is None:
                continue
            length = 1
            while index + length < len(new) and start + length < len(items):
                if not _same(items[start + length], new[index + length]):
                    break
                length += 1
            if length >= _MIN_COPY:
                return source_path, start, length
        return None

    def _old_lists(self) -> Iterator[tuple[Path, list[Any]]]:
        """Lists of objects in the old document under top-level keys this diff has not reached
        (so they are still as they were when a copy from them runs), a few levels deep."""
        if self._sources is None:
            self._sources = []
            for key, value in self.root.items():
                self._sources.extend(_lists_of_objects(value, [key], depth=3))
        for source_path, items in self._sources:
            if source_path[0] not in self._visited:
                yield source_path, items


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
        return False  # not encodable as is: written out, never assumed equal


def _lists_of_objects(value: Any, path: Path, depth: int) -> Iterator[tuple[Path, list[Any]]]:
    if depth < 0:
        return
    if isinstance(value, list):
        if len(value) >= _MIN_COPY and isinstance(value[0], dict):
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
