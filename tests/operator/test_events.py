"""Which Events the operator posts: by default only those that tell what a TeamRun's status
does not (``notable``); ``all`` adds the routine ones (one API request each)."""

from __future__ import annotations

from oma_operator import events

ROUTINE = ("Queued", "AttemptStarted", "AttemptSucceeded")
NOTABLE = ("Resumed", "AttemptDisruption", "AttemptCrash", "Retried", "Unsuspended", "X")


def test_notable_leaves_out_the_routine_events_only() -> None:
    assert [r for r in ROUTINE + NOTABLE if events.posted(r, "notable")] == list(NOTABLE)


def test_all_posts_every_event() -> None:
    assert all(events.posted(r, "all") for r in ROUTINE + NOTABLE)
