"""Canonical JSON, request hashes and ids agree byte for byte with the TypeScript vectors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oma.approval import (
    DurableApprovalError,
    canonical_json,
    create_approval_request,
    hash_approval_request,
    parse_approval_request,
)
from oma.approval.canonical import sha256_hex
from tests.conformance_data import conformance_dir

_VECTOR_FILE = conformance_dir() / "e-approval-hash-vectors.json"
_VECTORS: dict[str, Any] = (
    json.loads(_VECTOR_FILE.read_text(encoding="utf-8")) if _VECTOR_FILE.is_file() else {}
)
VALUE_VECTORS = _VECTORS.get("vectors", [])
SCOPE_VECTORS = _VECTORS.get("scopeVectors", [])


def test_vectors_are_present() -> None:
    if not _VECTORS:
        pytest.skip(f"TypeScript hash vectors not found at {_VECTOR_FILE}")
    assert len(VALUE_VECTORS) >= 41 and len(SCOPE_VECTORS) >= 8


@pytest.mark.parametrize("vector", VALUE_VECTORS, ids=lambda v: v["name"])
def test_value_vector(vector: dict[str, Any]) -> None:
    value = json.loads(vector["input_json"])  # Python's parser keeps what JS's would, or more
    request = vector["request"]
    content = json.loads(request["content_json"])
    if "value_error" in vector:
        with pytest.raises(DurableApprovalError) as caught:
            canonical_json(value)
        assert caught.value.code == vector["value_error"]["code"]
        assert str(caught.value) == vector["value_error"]["message"]
        with pytest.raises(DurableApprovalError):
            create_approval_request(
                run_id=request["runId"],
                scope=request["scope"],
                boundary=request["boundary"],
                content=content,
            )
        return
    canonical = canonical_json(value)
    assert canonical == vector["value_canonical"]
    assert canonical.encode("utf-8").hex() == vector["value_canonical_utf8_hex"]
    assert sha256_hex(canonical) == vector["value_sha256"]
    created = create_approval_request(
        run_id=request["runId"],
        scope=request["scope"],
        boundary=request["boundary"],
        content=content,
    )
    assert (
        canonical_json(
            {"scope": request["scope"], "boundary": request["boundary"], "content": content}
        )
        == request["payload_canonical"]
    )
    assert created.request_hash == request["requestHash"]
    assert created.id == request["id"]


@pytest.mark.parametrize("vector", SCOPE_VECTORS, ids=lambda v: v["name"])
def test_scope_vector(vector: dict[str, Any]) -> None:
    given = vector["input"]
    expected = vector.get("createApprovalRequest_output")
    created = create_approval_request(
        run_id=given["runId"],
        scope=given["scope"],
        boundary=given["boundary"],
        content=given["content"],
        reason=given.get("reason"),
        requested_at=expected["requestedAt"] if expected else None,
    )
    assert created.request_hash == vector["requestHash"]
    assert created.id == vector["id"]
    assert (
        hash_approval_request(given["scope"], given["boundary"], given["content"])
        == (vector["requestHash"])
    )
    if expected:
        assert created.to_wire() == expected
        assert parse_approval_request(expected) == created


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (2**53 + 1, "9007199254740992"),
        (-1.5e-10, "-1.5e-10"),
        (123e300, "1.23e+302"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_js_number_formatting(number: float, text: str) -> None:
    assert canonical_json(number) == text


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (float("nan"), "non-finite"),
        (float("inf"), "non-finite"),
        (10**400, "non-finite"),
        ((1, 2), "plain JSON"),
        ({1: "a"}, "keys must be strings"),
        (object(), "plain JSON"),
    ],
)
def test_non_json_content_is_refused(value: Any, problem: str) -> None:
    with pytest.raises(DurableApprovalError, match=problem) as caught:
        canonical_json({"v": value})
    assert caught.value.code == "APPROVAL_VALIDATION_ERROR"


def test_cycles_are_refused() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(DurableApprovalError, match="cycle"):
        canonical_json(cyclic)
    shared = [1]
    assert canonical_json({"a": shared, "b": shared}) == '{"a":[1],"b":[1]}'


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    assert canonical_json({"\uff01": 1, "😀": 2}) == '{"😀":2,"\uff01":1}'


def test_tampered_stored_request_is_an_integrity_error() -> None:
    request = create_approval_request(
        run_id="r",
        scope="task_dispatch",
        boundary="t1",
        content={
            "kind": "task_dispatch",
            "task": {
                "id": "t1",
                "title": "Deploy",
                "description": "d",
                "status": "pending",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "updatedAt": "2026-01-01T00:00:00.000Z",
            },
        },
    )
    wire = request.to_wire()
    wire["content"]["task"]["title"] = "Deploy to production"
    with pytest.raises(DurableApprovalError) as caught:
        parse_approval_request(wire)
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"run_id": "  "}, "runId is empty"),
        ({"boundary": ""}, "boundary is empty"),
        ({"content": {"kind": "plan"}}, "does not match scope"),
    ],
)
def test_create_refuses_bad_input(kwargs: dict[str, Any], problem: str) -> None:
    base: dict[str, Any] = {
        "run_id": "r",
        "scope": "tool_call",
        "boundary": "t:c",
        "content": {
            "kind": "tool_call",
            "toolName": "x",
            "rawInput": {},
            "input": {},
            "agentName": "a",
            "taskId": "t",
            "toolCallId": "c",
            "consequential": False,
        },
    }
    with pytest.raises(DurableApprovalError, match=problem) as caught:
        create_approval_request(**{**base, **kwargs})
    assert caught.value.code == "APPROVAL_VALIDATION_ERROR"
