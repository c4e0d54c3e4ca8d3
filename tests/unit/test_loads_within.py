"""``jsonutil.loads_within``: the parser bounds a document's nesting for free, and text that is
not exactly one JSON value is never taken for one (the wrappers could otherwise hide it)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oma import jsonutil
from oma.checkpoint.manager import decode_snapshot
from oma.errors import CheckpointDecodeError, CheckpointValidationError


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("depth", "known"), [(0, True), (1, True), (200, True), (201, False)])
def test_the_bound_is_exact(depth: int, known: bool) -> None:
    text = _nested(depth) if depth else "7"
    value, bounded = jsonutil.loads_within(text, 200)
    assert bounded is known
    assert jsonutil.nesting_depth(value) == depth


@pytest.mark.parametrize(
    "text",
    [
        "1],[2",  # closes a wrapper early: two elements at that level
        '{"a":1}],[{"b":2}',
        "]",
        "[",
        "",
        "1 2",
        "[1]]",
    ],
)
def test_text_that_is_not_one_json_value_is_refused(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        jsonutil.loads_within(text, 200)


def test_what_orjson_cannot_read_exactly_goes_the_exact_way_unbounded() -> None:
    long_integer = '{"n": 18446744073709551617}'
    assert jsonutil.loads_within(long_integer, 200) == ({"n": 2**64 + 1}, False)
    surrogate = '{"k": "\\ud800"}'
    assert jsonutil.loads_within(surrogate, 200) == ({"k": "\ud800"}, False)


def _orjson_reads(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, limit=st.integers(1, 8))
def test_the_value_and_the_bound_agree_with_the_walk(value: Any, limit: int) -> None:
    parsed, bounded = jsonutil.loads_within(json.dumps(value), limit)
    assert parsed == value
    depth = jsonutil.nesting_depth(value)
    if depth > limit:
        assert not bounded  # never claimed for a deeper value
    elif _orjson_reads(json.dumps(value)):
        assert bounded  # claimed whenever orjson could read it (no lone surrogate)


def test_a_snapshot_too_deep_is_still_refused_and_one_past_the_parser_is_a_decode_error() -> None:
    deep = '{"version": 4, "x": ' + _nested(250) + "}"
    with pytest.raises(CheckpointValidationError, match="nested 251 levels deep"):
        decode_snapshot(deep, "k")
    with pytest.raises(CheckpointDecodeError):
        decode_snapshot(_nested(100_000), "k")
