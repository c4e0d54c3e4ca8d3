"""Shared memory kept apart from the checkpoint store is carried in each snapshot
(``sharedMemory``), and ``restore()`` puts it back into the team's store: a resumed run, in a
new process with an empty memory store, sees what the first attempt's tasks wrote there."""

from __future__ import annotations

import json

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.team import AgentConfig, Team


def _team(memory: InMemoryStore, model: ScriptedAdapter) -> Team:
    return Team(
        name="memo",
        agents=[AgentConfig(name="writer", adapter=model)],
        shared_memory_store=memory,
    )


async def test_restore_puts_the_embedded_shared_memory_back() -> None:
    checkpoints, first_memory = InMemoryStore(), InMemoryStore()
    model = ScriptedAdapter([{"text": "the finding: 42"}, {"text": "the summary"}])
    done = await OpenMultiAgent().run_tasks(
        _team(first_memory, model),
        [
            {"title": "Find", "description": "Find it."},
            {"title": "Sum", "description": "Sum up.", "dependsOn": ["Find"]},
        ],
        checkpoint=CheckpointOptions(journal=False, store=checkpoints, run_id="memo"),
    )
    assert done.success, done.status
    written = {e.key: e.value for e in await first_memory.list()}
    assert any("the finding: 42" in value for value in written.values()), written
    stored = await checkpoints.get("__oma_checkpoint__/memo/latest")
    assert stored is not None
    snapshot = json.loads(stored.value)
    assert snapshot["sharedMemory"]["entries"]  # a separate store: the snapshot carries it

    fresh_memory = InMemoryStore()  # a new process: its memory store starts empty
    again = await OpenMultiAgent().restore(
        _team(fresh_memory, ScriptedAdapter([{"text": "must not be called"}])),
        checkpoint=CheckpointOptions(journal=False, store=checkpoints, run_id="memo"),
    )
    assert again.success and again.identity.attempt == 2
    restored = {e.key: e.value for e in await fresh_memory.list()}
    assert restored == written
