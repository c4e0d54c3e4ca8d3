"""The periodic loops' view of TeamRuns: only runs in a phase some work visits are kept (an
operator watching thousands of finished runs holds none of their bodies)."""

from __future__ import annotations

from typing import Any

from oma_operator.ticker import Ticker


def body(name: str, phase: str | None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": name, **meta},
        "status": {"phase": phase} if phase else {},
    }


async def test_only_runs_in_a_visited_phase_are_kept() -> None:
    async def nothing(_: dict[str, Any]) -> None:
        return None

    ticker = Ticker()
    ticker.every(3600, "Running", nothing, "progress")
    ticker.every(3600, "AwaitingApproval", nothing, "approvals")
    try:
        ticker.seen(body("a", "Running"), "ADDED")
        ticker.seen(body("b", "AwaitingApproval"), "ADDED")
        for phase in ("Queued", None, "Succeeded"):
            ticker.seen(body(f"other-{phase}", phase), "ADDED")
        assert [b["metadata"]["name"] for b in ticker.in_phase("Running")] == ["a"]
        assert [b["metadata"]["name"] for b in ticker.in_phase("AwaitingApproval")] == ["b"]
        assert len(ticker._runs) == 2
        ticker.seen(body("a", "Succeeded"), "MODIFIED")  # finished: dropped
        ticker.seen(body("b", "AwaitingApproval", deletionTimestamp="now"), "MODIFIED")
        assert ticker.in_phase("Running") == [] and ticker._runs == {}
    finally:
        await ticker.close()
