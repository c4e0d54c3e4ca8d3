"""Concurrency limits: the settings, which queued runs start, and the operator's slot view.

The view is fed what kopf's index holds (a mapping from the index key to each TeamRun's slot);
the hostile cases are the watch's own lag: events from before a start that this process wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from oma_operator.resources.bodies import TeamRunBody, TeamRunStatus
from oma_operator.resources.phases import Phase
from oma_operator.runs.rules.concurrency import Slot, admit, frees_slot, slot_of, verdict
from oma_operator.runs.rules.status import admitted, queued
from oma_operator.runs.run_queue import INDEX_KEY, RunQueue
from oma_operator.settings.limits import PROVIDERS, Limits, LimitsError


def teamrun(
    name: str,
    *,
    namespace: str = "team-a",
    phase: Phase | None = None,
    attempt: int = 0,
    providers: tuple[str, ...] = ("scripted",),
    created: str = "2026-12-03T10:00:00Z",
    queued_at: str | None = None,
    coordinator: str | None = None,
) -> TeamRunBody:
    spec: dict[str, Any] = {
        "team": {
            "agents": [{"name": f"a{i}", "model": {"provider": p}} for i, p in enumerate(providers)]
        }
    }
    if coordinator is not None:
        spec["coordinator"] = {"name": "lead", "model": {"provider": coordinator}}
    status: TeamRunStatus = {}
    if phase is not None:
        status["phase"] = phase
    if attempt:
        status["attempt"] = attempt
    if queued_at is not None:
        status["queuedAt"] = queued_at
    return {
        "metadata": {
            "uid": f"uid-{namespace}-{name}",
            "namespace": namespace,
            "name": name,
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": status,
    }


def slot(name: str, **kwargs: Any) -> Slot:
    return slot_of(teamrun(name, **kwargs))


# -- settings ------------------------------------------------------------------------------------


def test_limits_come_from_the_environment() -> None:
    limits = Limits.from_env(
        {
            "OMA_MAX_RUNNING_PER_NAMESPACE": "50",
            "OMA_MAX_RUNNING_PER_PROVIDER": " anthropic=20, openai = 10 ,",
        }
    )
    assert limits.per_namespace == 50
    assert dict(limits.per_provider) == {"anthropic": 20, "openai": 10}
    assert limits.active
    assert limits.describe() == "50 per namespace, 20 using anthropic, 10 using openai"


@pytest.mark.parametrize("unset", [{}, {"OMA_MAX_RUNNING_PER_NAMESPACE": "0"}])
def test_no_setting_or_zero_means_no_limit(unset: dict[str, str]) -> None:
    limits = Limits.from_env(unset)
    assert not limits.active and limits.describe() == "none"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OMA_MAX_RUNNING_PER_NAMESPACE": "fifty"}, "is not a whole number"),
        ({"OMA_MAX_RUNNING_PER_NAMESPACE": "-1"}, "is negative"),
        ({"OMA_MAX_RUNNING_PER_PROVIDER": "antropic=5"}, "PROVIDER one of scripted, anthropic"),
        ({"OMA_MAX_RUNNING_PER_PROVIDER": "anthropic"}, "is not PROVIDER=N"),
        ({"OMA_MAX_RUNNING_PER_PROVIDER": "anthropic=5,anthropic=6"}, "limited twice"),
        ({"OMA_MAX_RUNNING_PER_PROVIDER": "openai=many"}, "'many' is not a whole number"),
        ({"OMA_MAX_RUNNING_PER_PROVIDER": "openai=0"}, "leave a provider out"),
    ],
)
def test_a_bad_setting_is_refused_with_what_to_write(env: dict[str, str], says: str) -> None:
    with pytest.raises(LimitsError, match=says):
        Limits.from_env(env)


# -- which runs start (pure) ---------------------------------------------------------------------


def test_a_namespace_limit_counts_only_that_namespace() -> None:
    limits = Limits(per_namespace=2)
    holders = [slot("r1", phase="Running"), slot("r2", phase="Running")]
    holders.append(slot("b1", namespace="team-b", phase="Running"))
    waiting = [slot("q1", phase="Queued"), slot("q2", namespace="team-b", phase="Queued")]
    assert [s.name for s in admit(waiting, holders, limits)] == ["q2"]
    why = verdict(slot("new"), [], holders, limits)
    assert why == "namespace team-a has 2 TeamRuns running, its limit is 2"


def test_a_provider_limit_spans_namespaces_and_counts_the_coordinator() -> None:
    limits = Limits(per_provider={"anthropic": 2})
    holders = [
        slot("r1", phase="Running", providers=("anthropic", "openai")),
        slot(
            "r2",
            namespace="team-b",
            phase="Running",
            providers=("openai",),
            coordinator="anthropic",
        ),
    ]
    assert verdict(slot("new", providers=("anthropic",)), [], holders, limits) == (
        "2 TeamRuns using anthropic are running, the limit is 2"
    )
    assert verdict(slot("other", providers=("openai", "scripted")), [], holders, limits) is None


def test_queued_runs_start_oldest_first_and_a_blocked_one_holds_back_no_other() -> None:
    limits = Limits(per_namespace=4, per_provider={"openai": 1})
    holders = [slot("r1", phase="Running", providers=("openai",))]
    waiting = [
        slot("late", phase="Queued", created="2026-12-03T10:00:09Z"),
        slot(
            "needs-openai",
            phase="Queued",
            providers=("openai",),
            created="2026-12-03T10:00:01Z",
        ),
        slot("early", phase="Queued", created="2026-12-03T10:00:02Z"),
        slot("resumed", phase="Queued", attempt=2, queued_at="2026-12-03T10:00:10.000Z"),
    ]
    assert [s.name for s in admit(waiting, holders, limits)] == ["early", "late", "resumed"]


def test_a_new_run_queues_by_creation_and_a_resumed_one_by_when_it_was_queued_again() -> None:
    resumed = slot("a", phase="Queued", attempt=1, queued_at="2026-12-03T10:00:00.500Z")
    created = slot("b", created="2026-12-03T10:00:00Z", queued_at="2026-12-03T11:00:00.000Z")
    assert created.order < resumed.order  # milliseconds and whole seconds sort together


def test_a_new_run_does_not_overtake_runs_queued_before_it() -> None:
    limits = Limits(per_namespace=2)
    holders = [slot("r1", phase="Running")]
    earlier = slot("q1", phase="Queued", created="2026-12-03T09:00:00Z")
    newcomer = slot("new", created="2026-12-03T10:00:00Z")
    assert verdict(newcomer, [earlier], holders, limits) == (
        "namespace team-a has 2 TeamRuns running, its limit is 2"
    )
    later = slot("q9", phase="Queued", created="2026-12-03T11:00:00Z")
    assert verdict(newcomer, [later], holders, limits) is None


def test_status_of_a_queued_run_and_of_its_start() -> None:
    waiting = queued({}, "run-1", "namespace team-a has 2 TeamRuns running, its limit is 2", 1)
    assert waiting["phase"] == "Queued" and waiting["queuedAt"].endswith("Z")
    assert waiting["message"].startswith("waiting for a slot: namespace team-a")
    kinds = {c["type"]: (c["status"], c["reason"]) for c in waiting["conditions"]}
    assert kinds == {"Queued": ("True", "ConcurrencyLimit"), "Progressing": ("False", "Queued")}
    # ``queued`` gives a merge patch (dict[str, Any]); it is the status the next step reads
    running = admitted(cast(TeamRunStatus, waiting), 1, "run-1", 1, "sha256:ab")
    assert running["phase"] == "Running" and running["attempt"] == 1
    assert running["workDigest"] == "sha256:ab"  # what a retry compares the spec with
    assert running["queuedAt"] is None  # merge patch: removed
    kinds = {c["type"]: (c["status"], c["reason"]) for c in running["conditions"]}
    assert kinds["Queued"] == ("False", "Admitted") and kinds["Progressing"][0] == "True"


# -- the operator's view: kopf's index plus its own reservations ---------------------------------


class Index(dict[str, list[Slot]]):
    """What kopf's index holds: every TeamRun's latest slot under one key."""

    def show(self, body: TeamRunBody) -> None:
        seen = slot_of(body)
        self[INDEX_KEY] = [s for s in self.get(INDEX_KEY, []) if s.uid != seen.uid] + [seen]

    def drop(self, body: TeamRunBody) -> None:
        uid = body["metadata"]["uid"]
        self[INDEX_KEY] = [s for s in self.get(INDEX_KEY, []) if s.uid != uid]


def queue_with(limits: Limits, *bodies: TeamRunBody) -> tuple[RunQueue, Index]:
    index = Index()
    for body in bodies:
        index.show(body)
    run_queue = RunQueue()
    run_queue.configure(limits)
    run_queue.attach(index)
    return run_queue, index


def test_two_new_runs_never_take_the_same_last_slot() -> None:
    first, second = teamrun("first"), teamrun("second", created="2026-12-03T10:00:01Z")
    run_queue, _ = queue_with(Limits(per_namespace=1), first, second)
    assert run_queue.reserve(first, 1) is None
    assert run_queue.reserve(second, 1) == "namespace team-a has 1 TeamRuns running, its limit is 1"
    assert run_queue.reserve(first, 1) is None  # a repeated event of the holder: still its slot


def test_a_late_event_from_before_the_start_does_not_free_the_slot() -> None:
    waiting = teamrun("w", phase="Queued", created="2026-12-03T10:00:00Z")
    other = teamrun("o", phase="Queued", created="2026-12-03T10:00:05Z")
    run_queue, index = queue_with(Limits(per_namespace=1), waiting, other)
    assert [s.name for s in run_queue.due()] == ["w"]
    index.show(waiting)  # the watch still shows it Queued (its start is not seen yet)
    assert run_queue.due() == [] and [s.name for s in run_queue.holders()] == ["w"]
    index.show(teamrun("w", phase="Running", attempt=1))  # now it is
    assert [s.name for s in run_queue.holders()] == ["w"] and run_queue.due() == []
    index.show(teamrun("w", phase="Succeeded", attempt=1))
    assert [s.name for s in run_queue.due()] == ["o"]


def test_a_resumed_run_holds_its_slot_through_a_stale_awaiting_approval_event() -> None:
    suspended = teamrun("s", phase="AwaitingApproval", attempt=1)
    newcomer = teamrun("n", created="2026-12-03T10:00:05Z")
    run_queue, index = queue_with(Limits(per_namespace=1), suspended, newcomer)
    assert run_queue.reserve(suspended, 2) is None  # decided: attempt 2 takes the slot
    index.show(suspended)  # an event written before the resume arrives late
    assert run_queue.reserve(newcomer, 1) is not None
    index.show(teamrun("s", phase="Running", attempt=1))  # older than the resume, too
    assert run_queue.reserve(newcomer, 1) is not None
    index.show(teamrun("s", phase="Running", attempt=2))  # the watch sees attempt 2 run
    assert run_queue.reserve(newcomer, 1) is not None
    # Attempt 2 suspended again (the watch may show only the latest of several changes):
    index.show(teamrun("s", phase="AwaitingApproval", attempt=2))
    assert run_queue.reserve(newcomer, 1) is None  # awaiting approvals holds no slot


def test_a_deleted_or_given_back_reservation_frees_the_slot() -> None:
    one, two = teamrun("one"), teamrun("two", created="2026-12-03T10:00:01Z")
    run_queue, index = queue_with(Limits(per_namespace=1), one, two)
    assert run_queue.reserve(one, 1) is None
    run_queue.release(one["metadata"]["uid"])
    assert run_queue.reserve(two, 1) is None
    index.drop(two)  # deleted before the watch showed it running
    assert run_queue.reserve(one, 1) is None


def test_without_limits_every_run_starts_and_nothing_is_held() -> None:
    run_queue, _ = queue_with(Limits(), teamrun("a", phase="Running"), teamrun("b"))
    assert run_queue.reserve(teamrun("b"), 1) is None and not run_queue.active


def test_the_charts_schema_accepts_a_limit_for_every_provider_and_no_other() -> None:
    schema = json.loads((Path(__file__).parents[2] / "charts/oma/values.schema.json").read_text())
    per_provider = schema["properties"]["concurrency"]["properties"]["perProvider"]
    assert set(per_provider["properties"]) == set(PROVIDERS)
    assert per_provider["additionalProperties"] is False


def test_the_watched_copy_is_the_last_body_the_index_holds_and_none_without_one() -> None:
    from oma_operator.k8s.watched import WatchedTeamRuns

    watched = WatchedTeamRuns()
    assert watched.get("team-a", "r1") is None  # no index yet (before kopf's startup)
    body = teamrun("r1", phase="Queued")
    watched.attach({("team-a", "r1"): [body]})
    assert watched.get("team-a", "r1") is body
    assert watched.get("team-a", "r2") is None and watched.get("team-b", "r1") is None


def test_a_full_namespace_answers_at_once_and_its_queue_is_not_weighed() -> None:
    """The queue weighs only what could start: 3,000 queued runs of a full namespace cost the
    operator a sort per event before (a third of its CPU at scale)."""
    limits = Limits(per_namespace=2)
    holders = [slot("r1", phase="Running"), slot("r2", phase="Running")]

    class Unsortable(Slot):
        @property
        def order(self) -> tuple[str, str, str]:
            raise AssertionError("a run that cannot start was weighed")

    full = [Unsortable(**{**vars(slot(f"q{i}", phase="Queued"))}) for i in range(3)]
    assert admit(full, holders, limits) == []
    newcomer = slot("new", created="2026-12-03T10:00:00Z")
    assert verdict(newcomer, full, holders, limits) == (
        "namespace team-a has 2 TeamRuns running, its limit is 2"
    )
    other = slot("elsewhere", namespace="team-b", phase="Queued")
    assert [s.name for s in admit([*full, other], holders, limits)] == ["elsewhere"]


@pytest.mark.parametrize(
    ("kind", "phase", "kicks"),
    [
        ("DELETED", "Running", True),
        ("MODIFIED", "Succeeded", True),
        ("MODIFIED", "Failed", True),
        ("MODIFIED", "AwaitingApproval", True),
        ("MODIFIED", "Suspended", True),
        ("MODIFIED", "Running", False),
        ("MODIFIED", "Queued", False),
        ("ADDED", None, False),
    ],
)
def test_only_an_event_that_may_free_a_slot_wakes_the_queue(
    kind: str, phase: Phase | None, kicks: bool
) -> None:
    assert frees_slot(kind, teamrun("r", phase=phase)) is kicks
