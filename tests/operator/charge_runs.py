"""conf-c (the TypeScript reference's charge scenario) run into a store until it waits for the
charge's approval, and stores that count or age what the operator reads of it: shared by the
operator's tests of polling and of approved work."""

from __future__ import annotations

from oma.approval import Suspend
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import InMemoryStore, JournalEntry, JournalHead
from tests.engine.approval_fixtures import CHARGE_TASK, Recorder, charge_team

CHARGE_PLAN = {
    "version": 1,
    "tasks": [
        {"id": CHARGE_TASK, "title": "Charge", "description": "Charge.", "assignee": "operator"}
    ],
}


async def suspend_at_the_charge(store: InMemoryStore, journal: bool) -> None:
    """Run conf-c into ``store`` until it waits for the charge's approval."""
    recorder = Recorder()
    team, _ = charge_team(recorder)
    options = CheckpointOptions(store=store, run_id="conf-c", journal=journal)
    orchestrator = OpenMultiAgent(on_tool_call=recorder.gate(Suspend("Finance review")))
    result = await orchestrator.run_from_plan(team, CHARGE_PLAN, checkpoint=options)
    assert result.status.code == "suspended"


class CountingReads(InMemoryStore):
    """Records every journal it is asked to read whole."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        self.reads.append(key)
        return await super().journal_get(key, history=history)


class OlderRunnersHeads(CountingReads):
    """Journal heads as a runner from before 2026-12-05 wrote them: no ``approvals``."""

    async def journal_head(self, key: str) -> JournalHead | None:
        head = await super().journal_head(key)
        if head is None or head.metadata is None:
            return head
        metadata = {k: v for k, v in head.metadata.items() if k != "approvals"}
        return head.model_copy(update={"metadata": metadata})
