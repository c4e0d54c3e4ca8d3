"""A journal's depth bound: ``apply_within`` says a delta kept the document within a limit by
measuring only what it wrote, and never says so of a document that is deeper (the reader then
skips the walk of the whole document that the snapshot layout's parser makes unnecessary)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from oma.checkpoint.delta import Op, apply, apply_within, relative
from oma.checkpoint.delta_diff import diff
from oma.jsonutil import nesting_depth
from tests.unit import snapshot_fixtures

LIMIT = 12


def deep(levels: int) -> Any:
    """``levels`` nested containers (objects and lists alternating) around a string."""
    value: Any = "leaf"
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


def to_leaf(levels: int) -> list[str | int]:
    """The path from the top of ``deep(levels)`` to its leaf (``levels`` steps)."""
    return ["k" if level % 2 else 0 for level in range(levels - 1, -1, -1)]


def _copy_over(kind: str, m: int) -> list[Op]:
    return [["s", ["b", "d"], deep(m)], [kind, ["b", "d", *to_leaf(m)], ["held"]]]


def _extend_innermost(m: int, kind: str = "c") -> list[Op]:
    return [["s", ["b", "d"], deep(m)], [kind, ["b", "d", *to_leaf(m)[:-1]], ["a"], 0, 1]]


def _doc() -> dict[str, Any]:
    # depth 3: root, "a" (a list), its object; "held" a value of 5 levels one step down.
    return {"a": [{"x": 1}], "held": deep(5), "b": {"c": []}}


def _check(ops: list[Op]) -> tuple[bool, int]:
    doc = _doc()
    within = apply_within(doc, ops, LIMIT)
    plain = apply(_doc(), ops)
    assert orjson.dumps(doc) == orjson.dumps(plain)  # the same document either way
    return within, nesting_depth(doc)


@pytest.mark.parametrize(
    ("name", "at_limit", "one_over"),
    [
        # set at a path of 2 steps: 2 + depth(value)
        ("set", [["s", ["b", "d"], deep(10)]], [["s", ["b", "d"], deep(11)]]),
        # extend the list at ["b", "c"] (2 steps): 2 + depth(items as a list)
        ("extend", [["x", ["b", "c"], [deep(9)]]], [["x", ["b", "c"], [deep(10)]]]),
        # copy "held" (5 levels) over the leaf of deep(m) at ["b", "d"]: 2 + m + 5 levels
        ("copy deeper", _copy_over("v", 5), _copy_over("v", 6)),
        ("copy deeper, from before the delta", _copy_over("w", 5), _copy_over("w", 6)),
        # extend the innermost list of deep(m) (m + 1 steps) with "a"'s item: m + 1 + 2 levels
        ("copy a range deeper", _extend_innermost(9), _extend_innermost(10)),
        (
            "copy a range deeper, from before the delta",
            _extend_innermost(9, "o"),
            _extend_innermost(10, "o"),
        ),
    ],
)
def test_a_delta_is_within_the_limit_exactly_up_to_it(
    name: str, at_limit: list[Op], one_over: list[Op]
) -> None:
    for form in (lambda ops: ops, relative):  # as written, and as journals store them
        within, depth = _check(form(at_limit))
        assert (within, depth) == (True, LIMIT), name
        within, depth = _check(form(one_over))
        assert (within, depth) == (False, LIMIT + 1), name


def test_at_the_limit_only_a_scalar_fits() -> None:
    """A value written where the limit leaves no room: a scalar keeps the depth, a copied
    container does not (the parser's bound at 0 levels)."""
    scalar = [["s", ["b", "d"], deep(10)], ["v", ["b", "d", *to_leaf(10)], ["a", 0, "x"]]]
    assert _check(scalar) == (True, LIMIT)
    container = [["s", ["b", "d"], deep(10)], ["v", ["b", "d", *to_leaf(10)], ["held"]]]
    assert _check(container) == (False, LIMIT + 5)


def test_removals_keep_the_bound() -> None:
    within, _ = _check([["t", ["a"], 0], ["d", ["held"]]])
    assert within


def test_a_copy_the_parser_cannot_bound_is_measured() -> None:
    """A copied integer beyond 64 bits goes through the exact parser: still measured, when
    it goes deeper than its source."""
    doc: dict[str, Any] = {"a": [[2**70]], "b": [[]]}
    assert apply_within(doc, [["c", ["b", 0], ["a"], 0, 1]], LIMIT)
    assert doc["b"] == [[[2**70]]]
    doc = {"a": [[2**70, deep(LIMIT - 3)]], "b": [[]]}
    assert nesting_depth(doc) == LIMIT
    assert not apply_within(doc, [["c", ["b", 0], ["a"], 0, 1]], LIMIT)
    assert nesting_depth(doc) == LIMIT + 1


@pytest.mark.parametrize("kind", ["c", "o", "v", "w"])
def test_a_copy_no_deeper_than_its_source_keeps_a_document_within_without_a_walk(
    kind: str,
) -> None:
    """In a document within the limit, a value ``n`` steps deep nests at most ``limit - n``
    levels: a copy to a path of at most ``n`` steps cannot pass the limit (what the journal's
    reader relies on instead of measuring every copy), and the copy is a copy."""
    source: dict[str, Any] = {"x": {"y": deep(LIMIT - 3)}}
    assert nesting_depth(source) == LIMIT - 1
    for at in (["b"], ["b", "d"]):
        doc = copy.deepcopy(source) | {"b": {}}
        if kind in ("c", "o"):
            doc["x"]["y"] = [deep(LIMIT - 4)]
            doc["b"] = {"d": []}
            ops: list[Op] = [[kind, ["b", "d"], ["x", "y"], 0, 1]]
        else:
            ops = [[kind, at, ["x", "y"]]]
        assert apply_within(doc, ops, LIMIT)
        assert nesting_depth(doc) <= LIMIT
        copied = doc["b"]["d"] if kind in ("c", "o") or at == ["b", "d"] else doc["b"]
        original = doc["x"]["y"]
        assert copied == ([original[0]] if kind in ("c", "o") else original)
        assert copied is not original and (kind not in ("c", "o") or copied[0] is not original[0])


def test_real_deltas_of_a_snapshot_stay_within_and_rebuild_it() -> None:
    old = snapshot_fixtures.v4_completed_in_flight()
    new = copy.deepcopy(old)
    task = new["inFlightTasks"][0]
    task["conversationMessages"] = task["conversationMessages"] * 3
    new["completedTaskResults"] = new["completedTaskResults"][::-1]
    ops = diff(old, new)
    doc = copy.deepcopy(old)
    assert apply_within(doc, ops, 64)
    assert orjson.dumps(doc) == orjson.dumps(new)


def test_a_copy_nested_too_deeply_to_copy_is_refused_as_a_bad_record() -> None:
    """A hostile store's document (read by the exact parser, so not bounded at 200 levels)
    whose delta copies a part too deep for Python's recursion: a ``ValueError`` (the journal
    record is refused as ``CheckpointDecodeError``), never a ``RecursionError``."""
    doc: dict[str, Any] = {"a": [[2**70, deep(5000)]], "b": []}
    with pytest.raises(ValueError, match="nested too deeply to copy"):
        apply_within(doc, [["c", ["b"], ["a"], 0, 1]], LIMIT)
    with pytest.raises(ValueError, match="nested too deeply to copy"):
        apply(doc, [["c", ["b"], ["a"], 0, 1]])
