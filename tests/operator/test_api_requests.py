"""What keeps the operator's API requests per run down and deliberate: its rate limit (a token
bucket, as client-go's QPS and burst), its own writes taken as the newest copy of a TeamRun (no
409 from a lagging watch), and the progress poll leaving runs that just started alone."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

import kopf
import pytest

from oma_operator.handlers import DIFFBASE, watched_entry
from oma_operator.k8s.ratelimit import RateLimit
from oma_operator.k8s.watched import WatchedTeamRuns, newer
from oma_operator.main import _quiet_watch_handlers
from oma_operator.resources.bodies import Condition, TeamRunBody, TeamRunStatus
from oma_operator.runs.rules.progress import changed, poll_due


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def test_a_burst_goes_at_once_and_the_rest_waits_its_turn() -> None:
    clock = Clock()
    limit = RateLimit(10, 3, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        await limit.acquire()
    assert clock.slept == []  # the burst
    await limit.acquire()
    await limit.acquire()
    assert clock.slept == pytest.approx([0.1, 0.2])  # queued behind each other, 1/qps apart
    clock.now = 10.0  # idle long enough: the bucket is full again, never fuller than the burst
    clock.slept.clear()
    for _ in range(3):
        await limit.acquire()
    await limit.acquire()
    assert clock.slept == pytest.approx([0.1])
    assert limit.waited == pytest.approx(0.4)


def test_a_rate_limit_needs_a_rate_and_a_burst() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        RateLimit(0, 1)
    with pytest.raises(ValueError, match="burst >= 1"):
        RateLimit(5, 0)


def _teamrun(version: str, phase: str = "Running", name: str = "r") -> TeamRunBody:
    body: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "resourceVersion": version,
            "managedFields": [{"manager": "x"}],
        },
        "status": {"phase": phase},
    }
    return cast(TeamRunBody, body)


def test_resource_versions_are_compared_only_as_integers() -> None:
    assert newer("12", "9") and not newer("9", "12") and not newer("9", "9")
    assert not newer("abc", "9") and not newer("12", None) and not newer(None, "1")


def test_the_operators_own_write_is_newer_than_a_lagging_watch() -> None:
    watched = WatchedTeamRuns()
    index: dict[tuple[str, str], list[TeamRunBody]] = {("ns", "r"): [_teamrun("10")]}
    watched.attach(index)
    watched.wrote(_teamrun("11"))
    got = watched.get("ns", "r")
    assert got is not None and got["metadata"]["resourceVersion"] == "11"
    assert "managedFields" not in got["metadata"]  # not kept: most of a body's size
    watched.wrote(_teamrun("10"))  # an older answer never replaces a newer copy
    assert (watched.get("ns", "r") or {})["metadata"]["resourceVersion"] == "11"
    index[("ns", "r")] = [_teamrun("12")]  # the watch caught up (or someone else wrote)
    assert (watched.get("ns", "r") or {})["metadata"]["resourceVersion"] == "12"
    assert watched._written == {}  # dropped once the watch shows as much


def test_a_run_the_operator_ended_shows_its_end_until_the_watch_does() -> None:
    watched = WatchedTeamRuns()
    index: dict[tuple[str, str], list[TeamRunBody]] = {("ns", "r"): [_teamrun("5")]}
    watched.attach(index)
    watched.wrote(_teamrun("6", phase="Succeeded"))
    got = watched.get("ns", "r")  # not the watch's Running copy: nothing writes it again
    assert got is not None and (got.get("status") or {}).get("phase") == "Succeeded"
    del index[("ns", "r")]  # the watch showed the end (finished runs are not indexed)
    assert watched.get("ns", "r") is None and watched._written == {}


def test_a_watch_event_as_new_as_a_write_lets_go_of_it() -> None:
    watched = WatchedTeamRuns()
    watched.attach({})
    watched.wrote(_teamrun("6", phase="Succeeded"))
    watched.seen(_teamrun("5"))
    assert watched._written != {}
    watched.seen(_teamrun("6", phase="Succeeded"))
    assert watched._written == {}
    watched.wrote(_teamrun("7", name="other"))
    deleting = _teamrun("8", name="other")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-08T00:00:00Z"
    watched.wrote(deleting)
    assert watched.get("ns", "other") is None


def test_versions_that_are_not_integers_leave_the_watchs_copy_in_charge() -> None:
    watched = WatchedTeamRuns()
    watched.attach({("ns", "r"): [_teamrun("b")]})
    watched.wrote(_teamrun("c"))
    assert (watched.get("ns", "r") or {})["metadata"]["resourceVersion"] == "b"


def _progressing(since: datetime, status: Literal["True", "False"] = "True") -> TeamRunStatus:
    condition: Condition = {
        "type": "Progressing",
        "status": status,
        "reason": "AttemptStarted",
        "message": "",
        "lastTransitionTime": since.isoformat(),
        "observedGeneration": 1,
    }
    return {"phase": "Running", "conditions": [condition]}


def test_a_run_is_polled_only_once_its_attempt_ran_the_poll_period() -> None:
    now = datetime(2026, 12, 8, tzinfo=UTC)
    assert not poll_due(_progressing(now - timedelta(seconds=5)), now, 15)
    assert poll_due(_progressing(now - timedelta(seconds=15)), now, 15)
    assert poll_due({"phase": "Running"}, now, 15)  # no condition: as before, polled
    assert poll_due(_progressing(now, status="False"), now, 15)


def _record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


def test_kopfs_line_per_watch_event_is_left_out_and_nothing_else() -> None:
    assert not _quiet_watch_handlers(_record("Handler 'runner_pod_changed' succeeded."))
    assert not _quiet_watch_handlers(_record("Handler 'teamrun_event' succeeded."))
    assert _quiet_watch_handlers(_record("Handler 'decision_set' succeeded."))  # a real change
    assert _quiet_watch_handlers(_record("Handler 'teamrun_event' failed with an exception."))
    assert _quiet_watch_handlers(_record("Handler 'teamrun_event' succeeded.", logging.WARNING))


def test_kopf_builds_no_copy_of_teamruns_and_pods_to_compare() -> None:
    pod = kopf.Body({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"big": "x" * 100}})
    assert DIFFBASE.build(body=pod) == {}
    decision = kopf.Body(
        {
            "kind": "ApprovalDecision",
            "metadata": {"name": "d"},
            "spec": {"decision": "Approved", "content": "x" * 100, "summary": "s"},
        }
    )
    assert DIFFBASE.build(body=decision) == {"spec": {"decision": "Approved"}}


def test_a_finished_run_leaves_the_index_of_watched_bodies() -> None:
    """kopf drops an object's entry only for an empty mapping; for None it keeps the old one."""
    running = _teamrun("1")
    done = _teamrun("2", phase="Failed")
    assert set(watched_entry(running)) == {("ns", "r")}
    assert watched_entry(done) == {}


def _running(start: datetime, **fields: Any) -> TeamRunStatus:
    status = _progressing(start)
    return cast(TeamRunStatus, {**status, **fields})


def test_progress_is_written_only_on_a_change_a_reader_needs() -> None:
    start = datetime(2026, 12, 8, tzinfo=UTC)

    def at(seconds: int) -> str:
        return (start + timedelta(seconds=seconds)).isoformat()

    # 20 s in, one task of two running: a save and a turn are not worth a write of their own
    first = {"lastCheckpointAt": at(20), "taskSummary": "0/2", "turns": 3}
    assert changed(_running(start), first, 15) == {}
    # a task completed: written, with everything that changed along
    done = {"lastCheckpointAt": at(25), "taskSummary": "1/2", "turns": 1}
    assert changed(_running(start), done, 15) == done
    # a run still saving shows it once a minute (4 periods of 15 s) after its last mirror
    mirrored = _running(start, lastCheckpointAt=at(25), taskSummary="1/2", turns=1)
    assert changed(mirrored, {**done, "lastCheckpointAt": at(84), "turns": 5}, 15) == {}
    later = {**done, "lastCheckpointAt": at(85), "turns": 6}
    assert changed(mirrored, later, 15) == {"lastCheckpointAt": at(85), "turns": 6}
    # or since the attempt started when nothing was mirrored yet
    assert changed(_running(start), {"lastCheckpointAt": at(60), "taskSummary": "0/2"}, 15)
    # spend against a budget is always worth it
    assert changed(mirrored, {**done, "budgetSummary": "10/100 tokens"}, 15) != {}
    # without a period (the attempt's end): every difference
    assert changed(_running(start), first) == first
