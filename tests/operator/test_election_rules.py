"""Leader election's rules (pure): expiry is judged by the candidate's own clock from the moment
it saw the record change, never by the times written in the Lease; whatever a Lease says (it
is writable by anyone the RBAC lets) is refused safely and never lets a candidate take it early.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oma_operator.election.rules import (
    MAX_LEASE_SECONDS,
    Seen,
    Timing,
    TimingError,
    claim,
    observe,
    read_record,
    released,
    wait_before_taking,
)
from oma_operator.resources.bodies import LeaseBody

TIMING = Timing()  # 10 s lease, 7 s renew deadline, 2 s retry period


def lease(rv: str = "7", **spec: Any) -> LeaseBody:
    return cast(
        LeaseBody,
        {
            "metadata": {"name": "oma-operator", "namespace": "ops", "resourceVersion": rv},
            "spec": spec,
        },
    )


def wait(body: LeaseBody, seen_at: float, now: float) -> float:
    record = read_record(body)
    return wait_before_taking(record, observe(None, record, seen_at), now, TIMING)


def test_expiry_counts_from_when_the_record_was_seen_not_from_its_renew_time() -> None:
    # Renewed "in 1970" by a clock that is wrong, or forged: still 10 s from when it was seen.
    old = lease(
        holderIdentity="a", leaseDurationSeconds=10, renewTime="1970-01-01T00:00:00.000000Z"
    )
    assert wait(old, seen_at=100.0, now=100.0) == 10.0
    assert wait(old, seen_at=100.0, now=109.9) == pytest.approx(0.1)
    assert wait(old, seen_at=100.0, now=110.0) == 0.0
    # Renewed "in 2999": no longer than its duration either.
    future = lease(
        holderIdentity="a", leaseDurationSeconds=10, renewTime="2999-01-01T00:00:00.000000Z"
    )
    assert wait(future, seen_at=100.0, now=110.0) == 0.0


def test_a_changed_record_restarts_the_clock_and_an_unchanged_one_does_not() -> None:
    first = read_record(lease("7", holderIdentity="a", leaseDurationSeconds=10, renewTime="t1"))
    seen = observe(None, first, 100.0)
    assert observe(seen, first, 105.0) == seen  # the same record: still seen at 100
    renewed = read_record(lease("8", holderIdentity="a", leaseDurationSeconds=10, renewTime="t2"))
    again = observe(seen, renewed, 105.0)
    assert again.at == 105.0
    assert wait_before_taking(renewed, again, 112.0, TIMING) == pytest.approx(3.0)
    # Even a write that changes nothing of the spec (a new resourceVersion) counts as a change.
    touched = read_record(lease("9", holderIdentity="a", leaseDurationSeconds=10, renewTime="t2"))
    assert observe(again, touched, 111.0).at == 111.0


@pytest.mark.parametrize("duration", [-5, 0, None, "10", 3.5, True, [], {"x": 1}])
def test_a_missing_or_unbelievable_duration_waits_our_own_lease(duration: Any) -> None:
    body = lease(holderIdentity="a", leaseDurationSeconds=duration)
    assert read_record(body).lease_seconds is None
    assert wait(body, seen_at=0.0, now=0.0) == TIMING.lease_seconds


def test_a_shorter_duration_than_ours_never_lets_us_take_it_earlier() -> None:
    assert wait(lease(holderIdentity="a", leaseDurationSeconds=1), 0.0, 5.0) == 5.0


def test_a_huge_duration_keeps_us_waiting_at_most_the_longest_lease_anyone_may_hold() -> None:
    body = lease(holderIdentity="a", leaseDurationSeconds=10**12)
    assert wait(body, seen_at=0.0, now=0.0) == TIMING.lease_seconds  # not believed at all
    body = lease(holderIdentity="a", leaseDurationSeconds=MAX_LEASE_SECONDS)
    assert wait(body, seen_at=0.0, now=0.0) == MAX_LEASE_SECONDS


@pytest.mark.parametrize("holder", [None, "", 42, ["a"], {"a": 1}])
def test_a_lease_without_a_holder_is_free_at_once(holder: Any) -> None:
    body = lease(holderIdentity=holder, leaseDurationSeconds=10)
    assert read_record(body).holder == ""
    assert wait(body, seen_at=0.0, now=0.0) == 0.0


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
        ),
        max_leaves=20,
    ),
    st.dictionaries(
        st.sampled_from(
            [
                "holderIdentity",
                "leaseDurationSeconds",
                "renewTime",
                "acquireTime",
                "leaseTransitions",
            ]
        ),
        st.none() | st.integers() | st.floats() | st.text(max_size=10) | st.booleans(),
    ),
)
@settings(max_examples=300, deadline=None)
def test_no_lease_body_crashes_the_rules(garbage: Any, spec: dict[str, Any]) -> None:
    for body in (
        garbage,
        {"metadata": garbage, "spec": garbage},
        {"metadata": {"resourceVersion": "1"}, "spec": spec},
    ):
        record = read_record(cast(LeaseBody, body))  # what an API server or a forger sent
        assert isinstance(record.holder, str)
        assert record.lease_seconds is None or 0 < record.lease_seconds <= MAX_LEASE_SECONDS
        assert record.transitions >= 0
        left = wait_before_taking(record, observe(None, record, 50.0), 50.0, TIMING)
        # Held by anyone: never free before our own lease has passed since we saw it.
        assert (
            left == 0.0 if not record.holder else TIMING.lease_seconds <= left <= MAX_LEASE_SECONDS
        )


def test_taking_over_counts_a_transition_and_carries_the_version_read() -> None:
    held = lease(
        "41", holderIdentity="a", leaseDurationSeconds=10, leaseTransitions=4, acquireTime="t0"
    )
    taken = claim(
        held, name="oma-operator", namespace="ops", identity="b", timing=TIMING, now_iso="t9"
    )
    assert taken["metadata"].get("resourceVersion") == "41"
    assert taken["spec"] == {
        "holderIdentity": "b",
        "leaseDurationSeconds": 10,
        "acquireTime": "t9",
        "renewTime": "t9",
        "leaseTransitions": 5,
    }
    renewed = claim(
        lease("42", **taken["spec"]),
        name="oma-operator",
        namespace="ops",
        identity="b",
        timing=TIMING,
        now_iso="t11",
    )
    assert renewed["spec"].get("leaseTransitions") == 5  # a renewal is no transition
    assert renewed["spec"].get("acquireTime") == "t9"
    assert renewed["spec"].get("renewTime") == "t11"


def test_a_new_lease_starts_at_no_transitions_and_garbage_ones_at_zero() -> None:
    new = claim(None, name="l", namespace="ops", identity="a", timing=TIMING, now_iso="t")
    assert "resourceVersion" not in new["metadata"]
    assert new["spec"].get("leaseTransitions") == 0
    forged = lease(holderIdentity="x", leaseTransitions=-3)
    assert (
        claim(forged, name="l", namespace="ops", identity="a", timing=TIMING, now_iso="t")[
            "spec"
        ].get("leaseTransitions")
        == 1
    )
    top = lease(holderIdentity="x", leaseTransitions=2**31 - 1)
    assert (
        claim(top, name="l", namespace="ops", identity="a", timing=TIMING, now_iso="t")["spec"].get(
            "leaseTransitions"
        )
        == 2**31 - 1
    )


def test_a_lease_read_without_a_version_is_never_replaced_unconditionally() -> None:
    body = cast(LeaseBody, {"metadata": {"name": "l"}, "spec": {"holderIdentity": ""}})
    with pytest.raises(ValueError, match="resourceVersion"):
        claim(body, name="l", namespace="ops", identity="a", timing=TIMING, now_iso="t")


def test_a_released_lease_has_no_holder_and_keeps_its_count_and_labels() -> None:
    body = lease("5", holderIdentity="a", leaseDurationSeconds=10, leaseTransitions=3)
    body["metadata"]["labels"] = {"team": "ops"}
    out = released(body, name="oma-operator", namespace="ops", now_iso="t")
    assert out["spec"].get("holderIdentity") == ""
    assert out["spec"].get("leaseTransitions") == 3
    assert out["metadata"].get("labels") == {"team": "ops"}
    assert out["metadata"].get("resourceVersion") == "5"


@pytest.mark.parametrize(
    ("lease_seconds", "renew", "retry"),
    [(10, 10, 2), (10, 12, 2), (10, 7, 6), (10, 7, 0), (10, 7, -1), (301, 7, 2), (10.5, 7, 2)],
)
def test_timings_that_cannot_keep_one_leader_are_refused(
    lease_seconds: float, renew: float, retry: float
) -> None:
    with pytest.raises(TimingError):
        Timing(lease_seconds, renew, retry)


@given(
    st.floats(0, 1000),  # when the leader sent its last renewal that succeeded
    st.floats(0, 30),  # how long after that the standby saw the renewed record
)
def test_a_leader_stops_before_any_standby_may_take_over(sent: float, delay: float) -> None:
    # The leader stops acting at sent + renew deadline (Elector.keep and its watchdog); a
    # standby saw the renewal no earlier than the API server stored it, which is after it was
    # sent, and takes the lease no earlier than a lease duration after that.
    record = read_record(lease("9", holderIdentity="a", leaseDurationSeconds=10))
    seen = Seen(record.fingerprint, sent + delay)
    stops_at = sent + TIMING.renew_deadline
    earliest = seen.at + wait_before_taking(record, seen, seen.at, TIMING)
    assert earliest - stops_at >= TIMING.lease_seconds - TIMING.renew_deadline - 1e-9
