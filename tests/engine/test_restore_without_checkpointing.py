"""``restore()`` with checkpointing turned off says so, typed, instead of an AssertionError."""

from __future__ import annotations

import pytest

from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.orchestrator.activation import CheckpointConfigError
from oma.team import AgentConfig, Team


def _team() -> Team:
    return Team(name="t", agents=[AgentConfig(name="a", adapter=ScriptedAdapter([{"text": "x"}]))])


@pytest.mark.parametrize(
    ("orchestrator", "checkpoint"),
    [
        (OpenMultiAgent(), False),
        (OpenMultiAgent(), CheckpointOptions(enabled=False, run_id="r")),
        (OpenMultiAgent(checkpoint=False), None),
    ],
)
async def test_restore_without_checkpointing_is_a_typed_error(
    orchestrator: OpenMultiAgent, checkpoint: bool | CheckpointOptions | None
) -> None:
    with pytest.raises(CheckpointConfigError, match="restore\\(\\) needs checkpointing") as caught:
        await orchestrator.restore(_team(), checkpoint=checkpoint)
    assert caught.value.code == "CHECKPOINT_CONFIG"
