"""SIGKILL a run at every durable boundary (each store write, before and after), on every
backend: nothing diverges from the clean run, no committed call runs again, no effect is
applied twice, and every non-idempotent call that may have happened goes to a reviewer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import BackendReport, backend_store_for, run_backend, table

_reports: dict[str, BackendReport] = {}


@pytest.mark.crash
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["file", "redis", "postgres"])
def test_kill_at_every_boundary(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    report = run_backend(backend, tmp_path, backend_store_for(backend, request, tmp_path))
    _reports[backend] = report
    print("\n" + table(list(_reports.values())))
    assert report.boundaries >= 20 and report.kill_points == 2 * report.boundaries
    assert report.kills == report.kill_points, "every planned kill must have happened"
    assert report.failures == [], "\n".join(report.failures[:5])
    assert (report.diverged, report.committed_rerun) == (0, 0)
    assert (report.ledger_twice, report.tally_twice) == (0, 0)
    assert report.uncertain >= 2  # a kill between a tally's start mark and its commit
