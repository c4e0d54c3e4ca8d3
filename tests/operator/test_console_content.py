"""What the console's decision page shows of a request (pure): every value of the exact content
the hash binds, escaped, the hash recomputed from it, and what changed since an earlier request."""

from __future__ import annotations

from typing import Any

from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma_operator.console.rules.content_diff import Change, content_diff
from oma_operator.console.rules.content_view import content_view, recomputed_hash

HOSTILE = "pay\x1b[2K\u202eevil\u200b\nnext"


def _request(**arguments: Any) -> ApprovalRequest:
    content = {
        "kind": "tool_call",
        "toolName": "wire",
        "rawInput": arguments,
        "input": arguments,
        "agentName": "clerk",
        "taskId": "t-1",
        "toolCallId": "c1",
        "consequential": True,
    }
    return create_approval_request(
        run_id="r1", scope="tool_call", boundary="t-1:c1", content=content
    )


def test_every_value_is_a_row_at_its_path_with_hidden_characters_escaped() -> None:
    request = _request(memo=HOSTILE, amount=7, **{"to\u202e/x": "bob"})
    view = content_view(request.content)
    rows = {row.path: row for row in view.rows}
    memo = rows["/input/memo"]
    assert memo.kind == "string" and memo.escaped
    assert memo.text == '"pay\\x1b[2K\\u202eevil\\u200b\\nnext"'
    assert not any(c in memo.text for c in "\x1b\u202e\u200b\n")
    key = rows["/input/to\\u202e~1x"]  # a key's "/" as in a JSON pointer, its bidi escaped
    assert key.escaped and key.text == '"bob"'
    assert rows["/input/amount"].text == "7" and rows["/consequential"].text == "true"
    assert rows["/"].text == "{8 keys}" and rows["/input"].depth == 1
    assert view.escaped and view.hidden_rows == 0


def test_the_hash_is_recomputed_from_what_is_shown_and_a_changed_content_is_caught() -> None:
    request = _request(amount=7)
    assert recomputed_hash(request) == request.request_hash
    forged = request.model_construct(**{**dict(request), "content": {**request.content}})
    forged.content["input"] = {"amount": 7000}  # shown, but not what was hashed
    assert recomputed_hash(forged) != request.request_hash


def test_deep_and_large_content_is_shown_without_recursion_and_cut_saying_how_much() -> None:
    deep: Any = "bottom"
    for _ in range(5000):
        deep = {"d": deep}
    view = content_view(deep)
    assert len(view.rows) == 5000 and view.hidden_rows == 1  # the last level is past the limit
    wide = content_view({"items": list(range(20))}, limit=5)
    assert [row.path for row in wide.rows] == ["/", "/items", "/items/0", "/items/1", "/items/2"]
    assert wide.hidden_rows == 17


def test_a_diff_names_each_added_removed_and_changed_value_by_path() -> None:
    before = _request(amount=7, to="bob", memo="rent", tags=["a", "b", "c"]).content
    after = _request(amount=7.0, to="eve", flag=True, tags=["a", "x"]).content
    changes = [c for c in content_diff(before, after) if c.path.startswith("/input/")]
    assert changes == [
        Change("/input/amount", "changed", "7", "7.0"),  # the hash sees the difference too
        Change("/input/flag", "added", None, "true"),
        Change("/input/memo", "removed", '"rent"', None),
        Change("/input/tags/1", "changed", '"b"', '"x"'),
        Change("/input/tags/2", "removed", '"c"', None),
        Change("/input/to", "changed", '"bob"', '"eve"'),
    ]
    assert content_diff(before, before) == []


def test_a_diff_shows_changed_values_escaped_and_cut() -> None:
    [change] = content_diff({"memo": "rent"}, {"memo": HOSTILE})
    assert change.after == '"pay\\u001b[2K\\u202eevil\\u200b\\nnext"'  # JSON escapes
    assert "\x1b" not in (change.after or "") and "\u202e" not in (change.after or "")
    [large] = content_diff({"blob": "a"}, {"blob": "b" * 5000})
    assert large.after is not None and large.after.endswith("[3002 more characters]")
    [kind] = content_diff({"v": 1}, {"v": True})
    assert (kind.before, kind.after) == ("1", "true")
    [shape] = content_diff({"v": {"a": 1}}, {"v": [1]})
    assert (shape.kind, shape.before, shape.after) == ("changed", '{"a":1}', "[1]")
