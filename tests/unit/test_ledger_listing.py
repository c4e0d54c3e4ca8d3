"""One ledger method lists a run's approval rows (the CLI's ``oma approvals list`` and the
operator read it), another names the keys of a run's rows for removal, also of rows that no
longer parse."""

from __future__ import annotations

import pytest

from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import DurableApprovalLedger, approval_key
from oma.approval.requests import create_approval_request
from oma.checkpoint.stored import remove_run
from oma.store import InMemoryStore


async def _ledger_with_two_runs() -> tuple[InMemoryStore, DurableApprovalLedger]:
    store = InMemoryStore()
    ledger = DurableApprovalLedger(store)
    for run_id, boundary in (("r1", "a"), ("r1", "b"), ("r2", "a")):
        request = create_approval_request(
            run_id=run_id,
            scope="plan",
            boundary=boundary,
            content={"kind": "plan", "continuation": "execute", "tasks": []},
        )
        await ledger.ensure_request(request)
    return store, ledger


async def test_a_runs_records_and_all_records() -> None:
    _, ledger = await _ledger_with_two_runs()
    assert sorted(r.request.boundary for r in await ledger.records("r1")) == ["a", "b"]
    assert [r.request.run_id for r in await ledger.records("r2")] == ["r2"]
    assert len(await ledger.records()) == 3
    assert await ledger.records("r3") == []


async def test_a_row_that_does_not_parse_is_named_when_listed_and_still_removed() -> None:
    store, ledger = await _ledger_with_two_runs()
    (first, _) = await ledger.records("r1")
    key = approval_key(first.request.id)
    entry = await store.get(key)
    assert entry is not None
    await store.set(key, "{not json", entry.metadata)  # a damaged row, its metadata intact
    with pytest.raises(DurableApprovalError, match=first.request.id):
        await ledger.records("r1")
    assert key in await ledger.row_keys("r1")
    removed = await remove_run(store, "r1")
    assert removed.approval_rows == 2
    assert [r.request.run_id for r in await ledger.records()] == ["r2"]
