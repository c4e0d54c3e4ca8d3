"""Task metadata (reference 3.1): refused when it could carry a secret or break the format,
redacted where a value holds credential text, from a task list, a plan and a checkpoint."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oma.checkpoint import Checkpoint
from oma.errors import OmaError
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore
from oma.task_metadata import check_task_metadata
from oma.team import AgentConfig, Team


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"api_key": "x"}, "names a credential"),
        ({"clientSecret": "x"}, "names a credential"),
        ({"OMA.trace": "x"}, "reserved prefix"),
        ({"oma.trace": "x"}, "reserved prefix"),
        ({"nested": {"a": 1}}, "no nested objects"),
        ({"n": float("nan")}, "no nested objects"),
        ({"long": "x" * 1025}, "1025 characters; at most 1024"),
        ({"emoji": "😀" * 513}, "1026 characters; at most 1024"),  # UTF-16 units, as JS counts
        ({f"k{i}": i for i in range(17)}, "17 entries; at most 16"),
        ({"mixed": [1, "a"]}, "scalars of one type"),
        ({"many": list(range(17))}, "17 items; at most 16"),
        ({"1st": "x"}, "must match"),
        ({"a" * 65: "x"}, "must match"),
        ("not an object", "must be an object"),
    ],
)
def test_what_task_metadata_may_not_be(metadata: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_task_metadata(metadata)


def test_credential_text_in_a_value_is_redacted_and_the_rest_kept() -> None:
    kept = check_task_metadata(
        {
            "ticket": "INC-7 password=hunter2",
            "notes": ["Authorization: Bearer abcdefghijklmnop", "plain"],
            "priority.level": 3,
            "urgent": True,
            "a" * 64: "x" * 1024,
        }
    )
    assert kept["ticket"] == "INC-7 password=[redacted]"
    assert "abcdefghijklmnop" not in kept["notes"][0] and kept["notes"][1] == "plain"
    assert (kept["priority.level"], kept["urgent"]) == (3, True)


async def test_a_run_stores_task_metadata_redacted_and_refuses_a_forged_checkpoint() -> None:
    store = InMemoryStore()
    team = Team(name="m", agents=[AgentConfig(name="a", adapter=ScriptedAdapter([{"text": "x"}]))])
    tasks: list[dict[str, Any]] = [
        {"title": "T", "description": "d", "metadata": {"ticket": "INC-1 password=hunter2"}}
    ]
    done = await OpenMultiAgent().run_tasks(
        team, tasks, checkpoint=CheckpointOptions(journal=False, store=store, run_id="m")
    )
    assert done.success
    stored = await store.get("__oma_checkpoint__/m/latest")
    assert stored is not None and "hunter2" not in stored.value
    snapshot = json.loads(stored.value)
    assert snapshot["queue"]["tasks"][0]["metadata"] == {"ticket": "INC-1 password=[redacted]"}

    with pytest.raises(ValueError, match="credential"):  # a task list is checked where made
        await OpenMultiAgent().run_tasks(
            team, [{"title": "T", "description": "d", "metadata": {"api_key": "sk-1"}}]
        )

    # The hostile case: a checkpoint whose task carries a credential under its name.
    snapshot["queue"]["tasks"][0]["metadata"] = {"api_key": "sk-live-1"}
    snapshot["queue"]["pending"] = [snapshot["queue"]["tasks"][0]["id"]]
    snapshot["queue"]["completed"] = []
    snapshot["queue"]["tasks"][0]["status"] = "pending"
    await store.set("__oma_checkpoint__/m/latest", json.dumps(snapshot))
    model = ScriptedAdapter([{"text": "must not run"}])
    forged = Team(name="m", agents=[AgentConfig(name="a", adapter=model)])
    assert await Checkpoint(store, run_id="m").load_latest() is not None  # as the reference
    options = CheckpointOptions(journal=False, store=store, run_id="m")
    with pytest.raises(OmaError, match=r"Invalid checkpoint task: .*names a credential") as refused:
        await OpenMultiAgent().restore(forged, checkpoint=options)
    assert refused.value.code == "INVALID_CHECKPOINT_STATE"
    assert model.calls == []  # refused before anything ran


def test_run_metadata_strings_are_cut_at_1024_utf16_units_as_the_reference_cuts_them() -> None:
    from oma.run_metadata import validate_run_metadata

    given = {"note": "x" * 2000, "emoji": "😀" * 600, "short": "ok", "list": ["y" * 1500]}
    kept = validate_run_metadata(given)
    assert kept["note"] == "x" * 1024 and kept["short"] == "ok"
    assert kept["list"] == ["y" * 1024]
    # 600 emoji are 1200 UTF-16 units: 512 whole ones fit, as JavaScript's slice(0, 1024) keeps.
    assert kept["emoji"] == "😀" * 512
    assert given["note"] == "x" * 2000  # the caller's dict is left alone


async def test_a_run_keeps_its_metadata_cut() -> None:
    store = InMemoryStore()
    team = Team(name="r", agents=[AgentConfig(name="a", adapter=ScriptedAdapter([{"text": "x"}]))])
    done = await OpenMultiAgent().run_tasks(
        team,
        [{"title": "T", "description": "d"}],
        checkpoint=CheckpointOptions(journal=False, store=store, run_id="r"),
        metadata={"note": "z" * 3000},
    )
    assert done.success
    stored = await store.get("__oma_checkpoint__/r/latest")
    assert stored is not None and json.loads(stored.value)["metadata"] == {"note": "z" * 1024}
