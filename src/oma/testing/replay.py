"""A pytest helper: a recorded run must replay the same with the current code.

::

    from oma.testing.replay import assert_replays

    async def test_the_refund_run_still_behaves(recorded_store):
        await assert_replays("specs/refund.yaml", recorded_store, "refund-2026-12-01")

It runs ``oma.replay.replay_run`` (offline: the recorded turns and tool results answer; the
store is only read) and fails the test with the first boundary and JSON path that differ.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from oma.replay import ReplayReport, replay_run
from oma.spec import RunSpec, load_run_spec
from oma.store.base import MemoryStore
from oma.tools.define import AnyTool


async def assert_replays(
    spec: RunSpec | str | Path,
    store: MemoryStore,
    run_id: str,
    *,
    tools: Mapping[str, AnyTool] | None = None,
) -> ReplayReport:
    """Replay ``run_id`` from ``store`` with ``spec`` (a spec or its file); ``AssertionError``
    naming where it diverges, else the report."""
    if not isinstance(spec, RunSpec):
        spec = load_run_spec(await asyncio.to_thread(Path(spec).read_bytes), str(spec))
    report = await replay_run(spec, store, run_id, tools=tools)
    found = report.divergence
    if found is not None:
        raise AssertionError(
            f"run {run_id} does not replay: boundary {found.seq}, {found.path}: recorded "
            f"{found.recorded!r}, replayed {found.replayed!r} (the replayed run ended "
            f"{report.outcome})"
        )
    return report
