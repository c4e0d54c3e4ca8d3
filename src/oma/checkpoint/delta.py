"""Deltas between two JSON documents: what a journal record holds instead of a whole snapshot.

A delta is a JSON array of operations; ``apply(doc, ops)`` performs them on ``doc`` in order,
and ``oma.checkpoint.delta_diff`` makes them (``DeltaEncoder.diff(old, new)`` gives the
operations that turn a copy of ``old`` into a document equal to ``new``, with the same key
order, so both encode to the same text). Each operation is an array whose first element names
it; a path is an array of object keys and list indices from the root:

- ``["s", path, value]``: set the value at ``path`` (an object key, or a list index: an index
  equal to the list's length appends);
- ``["d", path]``: delete an object key;
- ``["x", path, items]``: extend the list at ``path`` with ``items``;
- ``["t", path, n]``: truncate the list at ``path`` to ``n`` items;
- ``["c", path, source, start, stop]``: extend the list at ``path`` with copies of
  ``source[start:stop]``, ``source`` being a list's path in the document as it is when this
  operation runs (items written earlier in the same delta);
- ``["o", path, source, start, stop]``: the same, ``source`` read in the document as it was
  before the delta (items of the previous snapshot);
- ``["v", path, source]``: set the value at ``path`` to a copy of the value at ``source`` in the
  document as it is when this operation runs;
- ``["w", path, source]``: the same, ``source`` read in the document as it was before the delta.

A path may start with a number ``k`` instead of a key (the root is an object, so no absolute
path does): it then means the first ``k`` steps of the previous operation's path followed by
the rest (``[2, "phase"]`` after ``["inFlightTasks", 0, "turns"]`` is ``["inFlightTasks", 0,
"phase"]``), and a source path starting with ``k`` takes the first ``k`` steps of its own
operation's path. Most operations of a delta touch one in-flight task, so this keeps the
delta's bytes close to what changed. An oma from before this form refuses such a journal (a path
that "does not exist") instead of misreading it.
"""

from __future__ import annotations

import copy
import reprlib
from typing import Any

import orjson

from oma import jsonutil

Path = list[str | int]
Op = list[Any]
_BEFORE = ("o", "w")  # operations whose source is the document before the delta
_COPIES = ("c", "o", "v", "w")  # compared, not hashed: a hostile record's name may be a list
# A record's part in a message: a few levels and characters of it, never its whole nesting (a
# record may nest a thousand levels, more than ``repr`` can print).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 4, 60, 60


def _shown(value: Any) -> str:
    return _SHOWN.repr(value)[:160]


def apply(doc: dict[str, Any], ops: list[Op], shared: set[int] | None = None) -> dict[str, Any]:
    """Apply ``ops`` to ``doc`` in place (and return it). Raises ``ValueError`` on an
    operation that does not fit the document (a journal that does not belong to its base).

    ``shared``: copy on write. A range copy then puts the very items of its source in its
    target and notes them here, and a later operation that writes inside one of them (in any
    record applied with the same set) first replaces it, where it writes, by a copy of its own:
    a reader that keeps only the final document (a restore) gets one without copying a long
    conversation into the runner's list beside it. Items in both lists stay the same objects,
    as in a live run. Without it every copy is deep (a caller that keeps documents apart)."""
    _apply(doc, ops, None, shared)
    return doc


def apply_within(
    doc: dict[str, Any], ops: list[Op], limit: int, shared: set[int] | None = None
) -> bool:
    """``apply``, and whether every value the delta wrote is known to keep the document within
    ``limit`` levels (``jsonutil.nesting_depth``) given that ``doc`` was: a value written at a
    path of n steps adds at most n levels to its own. Only what the delta writes is measured
    (a copy to a path no deeper than its source is bounded by where it came from, another is
    measured), never the whole document. ``False``: not known, for the caller to measure."""
    return _apply(doc, ops, limit, shared)


def _apply(doc: dict[str, Any], ops: list[Op], limit: int | None, shared: set[int] | None) -> bool:
    try:
        ops = resolved(ops)
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"a journal operation's paths do not resolve: {exc}") from exc
    within = limit is not None
    try:
        # Sources in the document before the delta are read before anything changes.
        before = {
            i: _source(doc, op, _room(op, limit), shared)
            for i, op in enumerate(ops)
            if op[0] in _BEFORE
        }
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"a journal operation's source does not exist: {exc}") from exc
    for index, op in enumerate(ops):
        try:
            # Once one operation is not known to fit, the rest need not be measured.
            room = _room(op, limit) if within else None
            fits = _apply_one(doc, op, before.get(index), room, shared)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"journal operation {_shown(op)} does not apply: {exc}") from exc
        within = within and fits
    return within


def _room(op: Op, limit: int | None) -> int | None:
    """How many levels the value an operation writes may nest (``limit`` less its path)."""
    path = op[1]
    return limit - len(path) if limit is not None and isinstance(path, list) else None


def resolved(ops: list[Op]) -> list[Op]:
    """``ops`` with every relative path (one that starts with a number) made absolute. An
    operation with absolute paths is passed on as it is (``ops`` are never changed)."""
    out: list[Op] = []
    last: Any = []
    for op in ops:
        if type(op) is not list or len(op) < 2:
            raise ValueError(f"journal operation {_shown(op)} is not [name, path, ...]")
        path = op[1]
        if _is_relative(path):
            path = _absolute(path, last)
            op = [op[0], path, *op[2:]]
        if len(op) > 2 and op[0] in _COPIES and _is_relative(op[2]):
            op = [op[0], path, _absolute(op[2], path), *op[3:]]
        out.append(op)
        last = path
    return out


def _is_relative(path: Any) -> bool:
    return type(path) is list and bool(path) and type(path[0]) is int


def relative(ops: list[Op]) -> list[Op]:
    """``ops`` (absolute paths) with each path written relative to the one before it, and
    each source relative to its operation's path, where they share a first step."""
    out: list[Op] = []
    last: Path = []
    for op in ops:
        path = op[1]
        short = [op[0], _relative_to(path, last), *op[2:]]
        if op[0] in ("c", "o", "v", "w"):
            short[2] = _relative_to(op[2], path)
        out.append(short)
        last = path
    return out


def _relative_to(path: Path, base: Path) -> list[Any]:
    keep = 0
    for a, b in zip(path, base, strict=False):
        if a != b or type(a) is not type(b):
            break
        keep += 1
    return [keep, *path[keep:]] if keep else list(path)


def _absolute(path: Any, base: Any) -> Any:
    if not _is_relative(path):
        return path  # absolute, or not a path at all (refused where it is used)
    keep = path[0]
    steps = len(base) if type(base) is list else 0  # after an operation that had no path
    if not 0 < keep <= steps:
        raise ValueError(f"relative path {_shown(path)} keeps {keep} of {steps} steps")
    return [*base[:keep], *path[1:]]


def _source(
    doc: dict[str, Any], op: Op, room: int | None = None, shared: set[int] | None = None
) -> tuple[Any, bool]:
    """A deep copy of what a copying operation copies, read from ``doc`` as it is now, and
    whether it is known to nest at most ``room`` levels (the copied items as one list, for a
    range). A ``room`` is given only while ``doc`` is known to be within the limit, so a value
    found ``n`` steps deep nests at most ``limit - n`` levels: copied to a path no deeper than
    its source it fits without being measured (as every copy a journal writer makes does: a
    message into the runner's list beside the conversation, a tool's result into its record)."""
    source = op[2]
    found = _at(doc, source)
    fits = room is not None and len(source) >= len(op[1])
    if op[0] in ("c", "o"):
        if not isinstance(found, list):
            raise TypeError("a copy source must be a list")
        start, stop = op[3], op[4]
        if not (type(start) is int and type(stop) is int and 0 <= start <= stop):
            raise ValueError("a copied range is two indices, start <= stop")
        if stop > len(found):
            raise ValueError("the copy source is shorter than the copied range")
        found = found[start:stop]
        if shared is not None and (fits or room is None):  # nothing to measure: share them
            # every item's id, scalars' too (a C loop: 2,000 messages' copy-back at a
            # restore): a scalar is never written into, and an id reused later only costs
            # one needless copy on write
            shared.update(map(id, found))
            return found, fits
    if fits:
        return _copied(found, None)[0], True
    return _copied(found, room)


# Below this many bytes a copy is measured by walking it; above, by the parser (a parse padded
# to the depth limit costs about a thousand nested lists, whatever the value's size).
_WALKED_BYTES = 16_384


def _copied(value: Any, room: int | None) -> tuple[Any, bool]:
    if not isinstance(value, dict | list):  # a scalar: nothing to copy, no depth
        return value, room is not None and room >= 0
    try:
        text = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        # Lone surrogates or big integers: the slow, exact way, and the depth measured.
        try:
            copied = copy.deepcopy(value)
        except RecursionError:
            raise ValueError("the copied value is nested too deeply to copy") from None
        return copied, room is not None and jsonutil.nesting_depth(copied) <= room
    if room is None or room < 0:  # not measured, or the path alone is past the limit
        return orjson.loads(text), False
    if len(text) < _WALKED_BYTES:
        copied = orjson.loads(text)
        return copied, jsonutil.nesting_depth(copied) <= room
    copied, bounded = jsonutil.loads_within(text, room, orjson_text=True)
    return copied, bounded or jsonutil.nesting_depth(copied) <= room


def _fits(value: Any, room: int | None) -> bool:
    if room is None:
        return False
    return (
        room >= 0 if not isinstance(value, dict | list) else jsonutil.nesting_depth(value) <= room
    )


def _apply_one(
    doc: dict[str, Any],
    op: Op,
    before: tuple[Any, bool] | None,
    room: int | None,
    shared: set[int] | None = None,
) -> bool:
    """Apply one operation; whether what it wrote fits in ``room`` levels."""
    kind, path = op[0], op[1]
    if kind in ("c", "o", "v", "w"):
        value, fits = before if before is not None else _source(doc, op, room, shared)
        if kind in ("c", "o"):
            _list_at(doc, path, shared).extend(value)
        else:
            _set(doc, path, value, shared)
        return fits
    if kind == "s":
        _set(doc, path, op[2], shared)
        return _fits(op[2], room)
    if kind == "x":
        items = op[2]
        if not isinstance(items, list):
            raise TypeError("extend needs a list of items")
        _list_at(doc, path, shared).extend(items)
        return _fits(items, room)
    if kind == "t":
        target, size = _list_at(doc, path, shared), op[2]
        if type(size) is not int or not 0 <= size <= len(target):
            raise ValueError("truncation outside the list")
        del target[size:]
        return True  # removing never deepens
    if kind == "d":
        parent = _at(doc, path[:-1], shared)
        if not isinstance(parent, dict):
            raise TypeError("delete from a value that is not an object")
        del parent[path[-1]]
        return True
    raise ValueError(f"unknown operation {_shown(kind)}")


def _set(doc: dict[str, Any], path: Path, value: Any, shared: set[int] | None = None) -> None:
    if not path:
        raise ValueError("an operation needs a non-empty path")
    parent, last = _at(doc, path[:-1], shared), path[-1]
    if isinstance(parent, list):
        if type(last) is not int or not 0 <= last <= len(parent):
            raise IndexError(f"index {_shown(last)} outside a list of {len(parent)}")
        if last == len(parent):
            parent.append(value)
        else:
            parent[last] = value
    elif isinstance(parent, dict) and isinstance(last, str):
        parent[last] = value
    else:
        raise TypeError("set on a value that is neither object nor list")


def _at(doc: Any, path: Any, shared: set[int] | None = None) -> Any:
    """The value at ``path``; with ``shared`` (a write is about to change it), each shared
    container on the way, the value included, first replaced by a copy of its own."""
    # The hot loop of a journal's assembly (a few steps per operation, thousands of
    # operations): exact type tests, and the lookup's own KeyError/IndexError for a step that
    # is not there. A JSON object's keys are strings, so a number finds nothing in one; a list
    # takes only a non-negative int (not a bool, not -1); anything else (a string) no step.
    if type(path) is not list:
        raise TypeError("a path is a list")
    node = doc
    try:
        for step in path:
            kind = type(node)
            if (kind is dict and type(step) is str) or (
                kind is list and type(step) is int and step >= 0
            ):
                child = node[step]
                if shared and id(child) in shared:
                    # An id can outlive its object and name a new one: a copy too many, no harm.
                    child = node[step] = _copied(child, None)[0]
                node = child
            else:
                raise KeyError(step)
    except (KeyError, IndexError):
        raise KeyError(f"path {_shown(path)} does not exist") from None
    return node


def _list_at(doc: Any, path: Path, shared: set[int] | None = None) -> list[Any]:
    node = _at(doc, path, shared)
    if not isinstance(node, list):
        raise TypeError(f"{_shown(path)} is not a list")
    return node
