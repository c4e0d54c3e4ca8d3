"""Shared hypothesis strategies: awkward text, JSON values, and mutations of JSON documents."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

# Strings that have broken JSON and storage layers before: NUL, lone surrogates (legal in JS
# strings and JSON escapes, illegal in UTF-8), RTL/bidi controls, BOM, line separators that JS
# treats specially, astral characters (two UTF-16 units), combining marks.
EDGE_STRINGS = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "x\ud83dy",
    "\u200f\u202eevil",
    "\ufeff",
    "\u2028\u2029",
    "\U0001f600\U00010348",
    "e\u0301\u0301",
    '"\\/\b\f\n\r\t',
    "}{][",
    "null",
    "  ",
]


def as_js_string(text: str) -> str:
    """``text`` as JSON (and JavaScript) can hold it: an adjacent high and low surrogate are one
    astral character there, so Python's two-code-point form cannot survive any JSON round trip."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


edge_text: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(EDGE_STRINGS),
    st.text(max_size=30),
    st.text(st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp"]), max_size=10).map(
        as_js_string
    ),
    st.text(st.characters(min_codepoint=0x10000), max_size=8),
)

# A long string once in a while; it stays moderate so CI stays fast.
huge_text: st.SearchStrategy[str] = st.integers(10_000, 200_000).map(lambda n: "\u05d0x" * (n // 2))

# Integers a JSON round trip keeps exact today: jsonutil.loads (orjson) reads integers outside
# the 64-bit range as floats (reported; see test_big_integers_survive_a_snapshot_round_trip).
exact_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)

json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    exact_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    edge_text,
)

# For inputs that must be refused or accepted, not round-tripped: beyond 64 bits too.
any_json_scalars: st.SearchStrategy[Any] = json_scalars | st.integers() | st.integers(2**63, 2**80)


def json_values(
    max_leaves: int = 12, *, scalars: st.SearchStrategy[Any] = json_scalars
) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(edge_text, inner, max_size=4),
        max_leaves=max_leaves,
    )


def json_objects(max_leaves: int = 12) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(edge_text, json_values(max_leaves), max_size=5)


# A value of a type a schema will not expect, for "wrong types" mutations.
wrong_types: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    edge_text,
    st.just([]),
    st.just({}),
    st.lists(edge_text, max_size=2),
    st.dictionaries(edge_text, st.integers(), max_size=2),
    huge_text,
)

Path = tuple[str | int, ...]


def paths(doc: Any) -> list[Path]:
    """Every location in a JSON document (root excluded), found without recursion."""
    found: list[Path] = []
    stack: list[tuple[Any, Path]] = [(doc, ())]
    while stack:
        node, at = stack.pop()
        children: list[tuple[str | int, Any]] = []
        if isinstance(node, dict):
            children = list(node.items())
        elif isinstance(node, list):
            children = list(enumerate(node))
        for name, child in children:
            found.append((*at, name))
            stack.append((child, (*at, name)))
    found.sort(key=repr)  # deterministic order, so hypothesis can shrink indexes
    return found


def get_at(doc: Any, at: Path) -> Any:
    for part in at:
        doc = doc[part]
    return doc


MUTATIONS = ("replace", "delete", "add_key", "wrap", "null", "stringify")


@st.composite
def mutated(draw: st.DrawFn, seed: Any, count: int = 3) -> tuple[Any, list[str]]:
    """``seed`` (deep-copied) with 1..``count`` structural mutations, and what was done."""
    doc = copy.deepcopy(seed)
    done: list[str] = []
    for _ in range(draw(st.integers(1, count))):
        locations = paths(doc)
        if not locations:
            break
        at = draw(st.sampled_from(locations))
        parent, last = get_at(doc, at[:-1]), at[-1]
        kind = draw(st.sampled_from(MUTATIONS))
        if kind == "replace":
            parent[last] = draw(wrong_types)
        elif kind == "delete":
            del parent[last]
        elif kind == "add_key" and isinstance(parent, dict):
            parent[draw(edge_text)] = draw(json_values(4))
        elif kind == "wrap":
            parent[last] = [parent[last]]
        elif kind == "null":
            parent[last] = None
        elif kind == "stringify":
            parent[last] = str(parent[last])
        done.append(f"{kind} {at!r}")
    return doc, done


def nested(depth: int, leaf: Any = "x") -> Any:
    """``depth`` levels of alternating objects and arrays around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value
