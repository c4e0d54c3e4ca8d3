"""Which Events the operator posts: by default only those that tell what a TeamRun's status
does not (``notable``); ``all`` adds the routine ones (one API request each)."""

from __future__ import annotations

import pytest

from oma_operator import events, runtime

ROUTINE = ("Queued", "AttemptStarted", "AttemptSucceeded")
NOTABLE = ("Resumed", "AttemptDisruption", "AttemptCrash", "Retried", "Unsuspended", "X")


def test_notable_leaves_out_the_routine_events_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "EVENTS", "notable")
    assert [r for r in ROUTINE + NOTABLE if events.posted(r)] == list(NOTABLE)


def test_all_posts_every_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "EVENTS", "all")
    assert all(events.posted(r) for r in ROUTINE + NOTABLE)
