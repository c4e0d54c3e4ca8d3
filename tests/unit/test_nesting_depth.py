"""``jsonutil.nesting_depth``: what the snapshot and tool-input depth limits count."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from oma.jsonutil import nesting_depth

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


def _walk(value: Any) -> int:
    """The definition: one more than the deepest child, for a container."""
    if isinstance(value, dict):
        return 1 + max((_walk(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_walk(v) for v in value), default=0)
    return 0


def test_scalars_and_containers_count_as_json_nesting() -> None:
    values: list[Any] = ["x", 1, None, [], {}, [{}], {"a": [1, {"b": []}]}]
    assert [nesting_depth(v) for v in values] == [
        0, 0, 0, 1, 1, 2, 4,
    ]  # fmt: skip


def test_a_very_deep_value_is_counted_without_recursion() -> None:
    deep: Any = []
    for _ in range(50_000):  # far past Python's recursion limit
        deep = [deep, "leaf"]
    assert nesting_depth(deep) == 50_001


@given(JSON)
def test_it_agrees_with_the_definition(value: Any) -> None:
    assert nesting_depth(value) == _walk(value)
