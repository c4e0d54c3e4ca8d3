"""When a finished TeamRun's time to live starts, which one applies, and its timer's life
(``oma_operator.runs.retention``; the deletion itself runs against a real API server in
tests/cluster/test_operator_e2e.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from oma_operator.resources.bodies import Condition, TeamRunBody, TeamRunStatus
from oma_operator.resources.phases import Phase
from oma_operator.runs.retention import FinishedRuns, finished_at, ttl_of

# A day ahead: no timer of these tests comes due while they run (nothing here talks to an API).
ENDED_AT = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
ENDED = ENDED_AT.strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(phase: Phase | None, ttl: Any = None, uid: str = "u1") -> TeamRunBody:
    spec: dict[str, Any] = {} if ttl is None else {"ttlSecondsAfterFinished": ttl}
    conditions: list[Condition] = [
        {"type": "Progressing", "status": "False", "lastTransitionTime": "2026-12-04T07:00:00Z"},
        {"type": "Succeeded", "status": "True", "lastTransitionTime": ENDED},
    ]
    status: TeamRunStatus = {"phase": phase, "conditions": conditions} if phase else {}
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": "r"},
        "spec": spec,
        "status": status,
    }


def test_the_run_s_own_time_to_live_wins_over_the_default() -> None:
    assert ttl_of(_run("Succeeded", 60), 3600) == 60
    assert ttl_of(_run("Succeeded", 0), 3600) == 0  # at once
    assert ttl_of(_run("Succeeded"), 3600) == 3600
    assert ttl_of(_run("Succeeded"), None) is None  # kept
    assert ttl_of(_run("Succeeded", True), None) is None  # not a number of seconds
    assert ttl_of(_run("Succeeded", -5), 10) == 10


def test_the_clock_starts_when_the_run_reached_its_final_phase() -> None:
    assert finished_at(_run("Succeeded")) == ENDED_AT
    cancelled = _run("Cancelled")
    cancelled["status"]["conditions"][1]["type"] = "Cancelled"  # spec.cancel: its own condition
    assert finished_at(cancelled) == ENDED_AT
    assert finished_at(_run("Suspended")) is None  # waiting, not finished
    assert finished_at(_run("Running")) is None
    assert finished_at(_run(None)) is None
    bare = _run("Failed")
    bare["status"]["conditions"] = []  # final without its condition: from now
    found = finished_at(bare)
    assert found is not None and abs(found - datetime.now(UTC)) < timedelta(seconds=5)


async def test_a_timer_is_armed_re_armed_and_dropped_with_the_run() -> None:
    runs = FinishedRuns()
    try:
        runs.seen(_run("Running", 60), "ADDED")
        assert runs.armed("u1") is None  # not finished
        runs.seen(_run("Succeeded", 3600), "MODIFIED")
        assert runs.armed("u1") == ENDED_AT + timedelta(hours=1)
        runs.seen(_run("Succeeded", 7200), "MODIFIED")  # the spec changed: a new due time
        assert runs.armed("u1") == ENDED_AT + timedelta(hours=2)
        runs.seen(_run("Succeeded"), "MODIFIED")  # no time to live any more: kept
        assert runs.armed("u1") is None
        runs.seen(_run("Succeeded", 7200), "MODIFIED")
        runs.seen(_run("Succeeded", 7200), "DELETED")
        assert runs.armed("u1") is None
        runs.default_ttl = 60
        runs.seen(_run("Failed", uid="u2"), None)  # listed at the operator's start
        assert runs.armed("u2") == ENDED_AT + timedelta(minutes=1)
    finally:
        await runs.close()
    assert runs.armed("u2") is None
    await asyncio.sleep(0)
