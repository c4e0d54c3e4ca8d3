"""Approval ledger rows: a damaged row is a typed error, never a wrong decision; the request
hash binds every byte of the content."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from oma.approval import (
    ApprovalRequest,
    DurableApprovalError,
    DurableApprovalLedger,
    approval_key,
    canonical_json,
    create_approval_request,
    hash_approval_request,
)
from oma.approval.ledger import ApprovalRecord
from oma.store import InMemoryStore
from tests.fuzz import seeds
from tests.fuzz.strategies import edge_text, json_objects, mutated
from tests.fuzz.tally import assert_code, examples, record

row_index = st.integers(min_value=0, max_value=1000)
# What a damaged row may be reported as; a missing row is None, never an error.
ROW_CODES = {"APPROVAL_INTEGRITY_ERROR"}


def _binding(record: ApprovalRecord) -> tuple[str, ...]:
    """Everything a decision is about: if any of it changed, the row must be refused."""
    request = record.request
    return (
        request.id,
        request.run_id,
        request.scope,
        request.boundary,
        request.request_hash,
        canonical_json(request.content),
    )


def _read(row_text: str, request_id: str) -> ApprovalRecord | None:
    async def go() -> ApprovalRecord | None:
        store = InMemoryStore()
        await store.set(approval_key(request_id), row_text)
        return await DurableApprovalLedger(store).get(request_id)

    return asyncio.run(go())


@settings(max_examples=examples(200))
@given(index=row_index, change=st.data())
def test_mutated_row_is_typed_or_binds_the_same_request(index: int, change: st.DataObject) -> None:
    original_row = seeds.approval_row(index)
    original = ApprovalRecord.model_validate(original_row)
    doc, _ = change.draw(mutated(original_row))
    try:
        got = _read(json.dumps(doc), original.request.id)
    except DurableApprovalError as error:
        assert_code(error, ROW_CODES)
        record("ledger: mutated row", "typed")
        return
    assert got is not None
    # Accepted only if it is still exactly the request that was decided on ...
    assert _binding(got) == _binding(original)
    # ... and any decision in it is a decision on that request.
    if got.decision is not None:
        assert got.decision.binds(got.request)
        assert got.decision.decision in ("approved", "rejected")
    record("ledger: mutated row", "valid")


@settings(max_examples=examples(100))
@given(index=row_index, cut=st.floats(0, 1, exclude_max=True))
def test_truncated_row_is_an_integrity_error(index: int, cut: float) -> None:
    row = seeds.approval_row(index)
    text = json.dumps(row)
    with pytest.raises(DurableApprovalError) as caught:
        _read(text[: int(len(text) * cut)], row["request"]["id"])
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"
    record("ledger: truncated row", "typed")


@settings(max_examples=examples(60))
@given(index=row_index, change=st.data())
def test_deciding_on_a_damaged_row_changes_nothing(index: int, change: st.DataObject) -> None:
    row = seeds.approval_row(index)
    row.pop("decision", None)
    request = ApprovalRequest.model_validate(row["request"])
    doc, _ = change.draw(mutated(row))
    text = json.dumps(doc)

    async def go() -> tuple[str | None, str | None]:
        store = InMemoryStore()
        key = approval_key(request.id)
        await store.set(key, text)
        try:
            made = await DurableApprovalLedger(store).decide(
                request_id=request.id,
                request_hash=request.request_hash,
                decision="approve",
                reviewer={"id": "fuzz"},
            )
        except DurableApprovalError as error:
            entry = await store.get(key)
            assert entry is not None and entry.value == text, "a refused decision wrote"
            return error.code, None
        assert made.binds(request)
        return None, made.decision

    code, decision = asyncio.run(go())
    if code is not None:
        assert code in ROW_CODES | {"APPROVAL_CONFLICT", "APPROVAL_STALE_DECISION"}
        record("ledger: decide on damaged row", "typed")
    else:
        assert decision == "approved"
        record("ledger: decide on damaged row", "valid")


def _tool_content(raw_input: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "kind": "tool_call",
        "toolName": "charge",
        "rawInput": raw_input,
        "input": raw_input,
        "agentName": text,
        "taskId": "t1",
        "toolCallId": "call-1",
        "consequential": True,
    }


@settings(max_examples=examples(150))
@given(first=json_objects(10), second=json_objects(10), text=edge_text, boundary=edge_text)
def test_request_hash_binds_content(
    first: dict[str, Any], second: dict[str, Any], text: str, boundary: str
) -> None:
    assume(boundary.strip())
    a, b = _tool_content(first, text), _tool_content(second, text)
    try:
        hash_a = hash_approval_request("tool_call", boundary, a)
        hash_b = hash_approval_request("tool_call", boundary, b)
    except DurableApprovalError as error:  # e.g. an integer beyond a double's range
        assert_code(error, {"APPROVAL_VALIDATION_ERROR"})
        record("ledger: hash binding", "typed")
        return
    # Equal hashes exactly when the canonical content is equal (JS number semantics).
    assert (hash_a == hash_b) == (canonical_json(a) == canonical_json(b))
    assert hash_approval_request("tool_call", boundary + "x", a) != hash_a
    assert hash_approval_request("task_dispatch", boundary, a) != hash_a
    record("ledger: hash binding", "valid")


@settings(max_examples=examples(100))
@given(raw_input=json_objects(10), text=edge_text, change=st.data())
def test_stored_request_with_altered_content_is_refused(
    raw_input: dict[str, Any], text: str, change: st.DataObject
) -> None:
    try:
        request = create_approval_request(
            run_id="run-1",
            scope="tool_call",
            boundary="tool:charge",
            content=_tool_content(raw_input, text),
            requested_at="2026-12-01T00:00:00.000Z",
        )
    except DurableApprovalError as error:
        assert_code(error, {"APPROVAL_VALIDATION_ERROR"})
        record("ledger: altered content", "typed")
        return
    row = ApprovalRecord(version=1, request=request)
    # The row written and read back unchanged is the same request, bit for bit.
    again = _read(row.to_json(), request.id)
    assert again is not None and _binding(again) == _binding(row)
    content, _ = change.draw(mutated(request.content))
    assume(canonical_json(content) != canonical_json(request.content))
    tampered = row.to_wire()
    tampered["request"]["content"] = content
    with pytest.raises(DurableApprovalError) as caught:
        _read(json.dumps(tampered), request.id)
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"
    record("ledger: altered content", "typed")
