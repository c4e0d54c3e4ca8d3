"""Which Events the operator posts: by default only those that tell what a TeamRun's status
does not (``notable``); ``all`` adds the routine ones (one API request each)."""

from __future__ import annotations

from typing import Any

from oma_operator import events

ROUTINE = ("Queued", "AttemptStarted", "AttemptSucceeded")
NOTABLE = ("Resumed", "AttemptDisruption", "AttemptCrash", "Retried", "Unsuspended", "X")


def test_notable_leaves_out_the_routine_events_only() -> None:
    assert [r for r in ROUTINE + NOTABLE if events.posted(r, "notable")] == list(NOTABLE)


def test_all_posts_every_event() -> None:
    assert all(events.posted(r, "all") for r in ROUTINE + NOTABLE)


def test_an_attempt_that_went_wrong_is_a_warning_and_a_normal_end_is_not() -> None:
    from oma_operator.runs.rules.decisions import end_event_type

    for kind in ("crash", "oom", "outage", "tool_changed", "permanent"):
        assert end_event_type(kind, "next_attempt", unconfirmed=False) == "Warning", kind
    for kind in ("succeeded", "suspended", "disruption", "fenced"):
        assert end_event_type(kind, "next_attempt", unconfirmed=False) == "Normal", kind
    assert end_event_type("disruption", "failed", unconfirmed=False) == "Warning"  # run failed
    assert end_event_type("suspended", "awaiting_approval", unconfirmed=False) == "Normal"
    assert end_event_type("succeeded", "succeeded", unconfirmed=True) == "Warning"


def test_resumed_says_from_a_checkpoint_only_when_one_was_saved() -> None:
    from oma_operator.runs.attempts import resumed_message

    saved: Any = {"metadata": {}, "status": {"checkpointSaved": True}}
    assert resumed_message(saved, 2, "r-a2", "disruption") == (
        "attempt 2 (pod r-a2) resumes from the latest checkpoint after attempt 1 ended (disruption)"
    )
    none: Any = {"metadata": {}, "status": {}}
    said = resumed_message(none, 2, "r-a2", "crash")
    assert "starts from the beginning" in said and "checkpoint after" not in said
