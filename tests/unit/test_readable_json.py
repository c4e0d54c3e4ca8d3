"""readable_json: approval content laid out for a reader, its numbers and escapes as the
canonical JSON (what the hash binds) holds them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oma.approval.canonical import canonical_json, readable_json
from oma.approval.errors import DurableApprovalError

PLAIN: Any = {"b": [1, "x", None, True, {}], "a": {"c": [], "d": "Zürich"}, "e": 2.5}


@pytest.mark.parametrize("indent", [None, 2])
def test_plain_data_is_laid_out_as_json_dumps_lays_it_out(indent: int | None) -> None:
    expected = json.dumps(PLAIN, ensure_ascii=False, sort_keys=True, indent=indent)
    assert readable_json(PLAIN, indent) == expected


def test_numbers_are_written_as_the_canonical_json_holds_them() -> None:
    value = {"int": 1000000, "as_float": 1000000.0, "half": 1.5, "big": 1e21, "small": 1e-7}
    value["long"] = 2**64 + 1
    text = readable_json(value)
    assert text == (
        '{"as_float": 1000000, "big": 1e+21, "half": 1.5, "int": 1000000, '
        '"long": 18446744073709552000, "small": 1e-7}'
    )
    assert json.loads(text) == json.loads(canonical_json(value))
    assert readable_json(value, 2).replace("\n", "").replace(" ", "") == canonical_json(value)


def test_strings_escape_as_the_canonical_json_does() -> None:
    value = {"k\n": "a\x1b[8m\r\u202e\ud800"}
    assert readable_json(value) == '{"k\\n": "a\\u001b[8m\\r\u202e\\ud800"}'


def test_what_is_not_json_data_is_refused_as_canonical_json_refuses_it() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    for bad in (cycle, {1: "x"}, {"x": float("nan")}, {"x": object()}):
        with pytest.raises(DurableApprovalError):
            readable_json(bad, 2)
