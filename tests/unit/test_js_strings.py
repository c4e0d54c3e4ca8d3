"""Where the reference trims or counts a string, oma does it the JavaScript way: approval ids
and hashes, reviewer ids, run id lengths; and run ids that could never resume are refused."""

from __future__ import annotations

import pytest

from oma.approval.models import derive_request_id, hash_approval_request
from oma.jsstring import js_trim, utf16_length
from oma.orchestrator.identity import InvalidRunIdError, resolve_requested_run_id

CONTENT = {"kind": "task_dispatch", "task": {"id": "t"}}


def test_trim_removes_what_javascript_removes_and_keeps_what_it_keeps() -> None:
    assert js_trim("\ufeff\u00a0 b \u2028\u3000") == "b"  # BOM, NBSP, line separator: trimmed
    assert js_trim("\x1cb\x1f") == "\x1cb\x1f"  # information separators: JavaScript keeps them
    assert js_trim("\x85b") == "\x85b"  # NEL too
    assert "\x1cb\x1f".strip() == "b" and "\ufeffb".strip() == "\ufeffb"  # Python's own differs


def test_a_boundary_with_a_bom_hashes_as_its_trimmed_self_and_one_with_nel_does_not() -> None:
    plain = hash_approval_request("task_dispatch", "t1", CONTENT)
    assert hash_approval_request("task_dispatch", "\ufeff t1 \ufeff", CONTENT) == plain
    assert hash_approval_request("task_dispatch", "t1\x85", CONTENT) != plain
    assert derive_request_id("r", "task_dispatch", "\ufefft1", plain) == derive_request_id(
        "r", "task_dispatch", "t1", plain
    )
    assert derive_request_id("r\x1c", "task_dispatch", "t1", plain) != derive_request_id(
        "r", "task_dispatch", "t1", plain
    )


def test_lengths_are_counted_in_utf16_units() -> None:
    assert utf16_length("abc") == 3 and utf16_length("😀") == 2 and utf16_length("é") == 1


@pytest.mark.parametrize(
    ("run_id", "problem"),
    [
        ("", "1-128 characters"),  # the reference throws; it is not "no run id"
        ("😀" * 65, "got 130"),  # 65 code points, 130 UTF-16 units
        ("x" * 129, "got 129"),
        (" pay", "starts or ends with whitespace"),
        ("pay\ufeff", "starts or ends with whitespace"),
        ("pay\n", "starts or ends with whitespace"),
    ],
)
def test_run_ids_that_are_refused(run_id: str, problem: str) -> None:
    with pytest.raises(InvalidRunIdError, match=problem) as refused:
        resolve_requested_run_id(run_id, None)
    assert refused.value.code == "INVALID_RUN_ID"


def test_run_ids_that_are_taken() -> None:
    assert resolve_requested_run_id("😀" * 64, None) == "😀" * 64  # 128 units
    assert resolve_requested_run_id("pay\x1c", None) == "pay\x1c"  # JavaScript keeps it too
    assert resolve_requested_run_id(None, "a b") == "a b"
    assert resolve_requested_run_id(None, None) is None
