"""The periodic loops' view of TeamRuns: only runs in a phase some work visits are kept (an
operator watching thousands of finished runs holds none of their bodies)."""

from __future__ import annotations

import asyncio
from typing import cast

from oma_operator.resources.bodies import ObjectMeta, TeamRunBody, teamrun_view
from oma_operator.resources.phases import Phase
from oma_operator.ticker import Ticker


def body(name: str, phase: Phase | None, **meta: str) -> TeamRunBody:
    return {
        # ``meta`` names ObjectMeta keys (deletionTimestamp) that mypy cannot check in a ** item
        "metadata": cast(ObjectMeta, {"namespace": "team-a", "name": name, **meta}),
        "status": {"phase": phase} if phase else {},
    }


async def test_only_runs_in_a_visited_phase_are_kept() -> None:
    async def nothing(_: TeamRunBody) -> None:
        return None

    ticker = Ticker()
    ticker.every(3600, "Running", nothing, "progress")
    ticker.every(3600, "AwaitingApproval", nothing, "approvals")
    try:
        ticker.seen(body("a", "Running"), "ADDED")
        ticker.seen(body("b", "AwaitingApproval"), "ADDED")
        others: tuple[Phase | None, ...] = ("Queued", None, "Succeeded")
        for phase in others:
            ticker.seen(body(f"other-{phase}", phase), "ADDED")
        assert [b["metadata"]["name"] for b in ticker.in_phase("Running")] == ["a"]
        assert [b["metadata"]["name"] for b in ticker.in_phase("AwaitingApproval")] == ["b"]
        assert len(ticker._runs) == 2
        ticker.seen(body("a", "Succeeded"), "MODIFIED")  # finished: dropped
        ticker.seen(body("b", "AwaitingApproval", deletionTimestamp="now"), "MODIFIED")
        assert ticker.in_phase("Running") == [] and ticker._runs == {}
    finally:
        await ticker.close()


def tenant_body(namespace: str, name: str) -> TeamRunBody:
    # "Waiting" is deliberately no Phase: the ticker visits whatever phase its work names.
    return teamrun_view(
        {"metadata": {"namespace": namespace, "name": name}, "status": {"phase": "Waiting"}}
    )


async def test_a_tenant_whose_store_never_answers_delays_no_other_tenant() -> None:
    """Eight runs of one tenant whose work hangs (a store that accepts and never answers) hold
    that tenant's own places only: another tenant's run is visited round after round, each
    hanging visit ends at its limit and is reported, and no run is visited twice at once."""
    hanging = asyncio.Event()  # never set
    visits: dict[str, int] = {}
    at_once: dict[str, int] = {}
    most_at_once = 0
    rounds_of_b = asyncio.Event()
    reported: list[str] = []
    first_report = asyncio.Event()

    async def work(run: TeamRunBody) -> None:
        nonlocal most_at_once
        meta = run["metadata"]
        name = meta["name"]
        visits[name] = visits.get(name, 0) + 1
        at_once[name] = at_once.get(name, 0) + 1
        most_at_once = max(most_at_once, at_once[name])
        try:
            if meta["namespace"] == "tarpit":
                await hanging.wait()
            elif visits[name] >= 5:
                rounds_of_b.set()
        finally:
            at_once[name] -= 1

    async def on_error(run: TeamRunBody, what: str, exc: Exception) -> None:
        reported.append(f"{run['metadata']['name']}: {exc}")
        first_report.set()

    ticker = Ticker(concurrency=8, per_namespace=2, visit_seconds=5.0)
    ticker.on_error = on_error
    ticker.every(0.05, "Waiting", work, "approvals")
    try:
        for i in range(8):
            ticker.seen(tenant_body("tarpit", f"slow-{i}"), "ADDED")
        ticker.seen(tenant_body("team-b", "quick"), "ADDED")
        # Five rounds of the quick run at 0.05 s apart: well before any hanging visit ends.
        await asyncio.wait_for(rounds_of_b.wait(), 30)
        assert not reported  # none of the hanging visits has reached its limit yet
        assert sum(visits.get(f"slow-{i}", 0) for i in range(8)) == 2  # its two places
        await asyncio.wait_for(first_report.wait(), 30)
        assert "did not finish within 5 s" in reported[0], reported
        assert most_at_once == 1, at_once
    finally:
        await ticker.close()
