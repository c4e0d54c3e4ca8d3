"""What an attempt's record in the attempt log counts (``oma checkpoint show``'s attempt lines)."""

from __future__ import annotations

import pytest

from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.keys import checkpoint_key
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from tests.engine.crashing import SimulatedCrash
from tests.engine.journal_kit import TASKS, Model, note_team


async def test_the_attempt_log_counts_every_call_the_run_keeps_a_result_of() -> None:
    """Calls of earlier turns of a task in flight count as committed (a resumed attempt's line
    in `oma checkpoint show` said 0 after two calls ran)."""
    store, executed = InMemoryStore(), list[str]()
    options = CheckpointOptions(store=store, run_id="count", attempt_log=True)
    with pytest.raises(SimulatedCrash):
        await OpenMultiAgent().run_tasks(
            note_team(Model(4, fail_at=2), executed), TASKS, checkpoint=options, run_id="count"
        )
    await OpenMultiAgent().restore(note_team(Model(4), executed), checkpoint=options)
    log = await load_attempt_log(store, checkpoint_key("count"))
    assert log is not None and [a.committed_tool_calls for a in log.attempts] == [0, 2]
