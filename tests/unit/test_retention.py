"""What a new base may drop under a history's retention (``oma.checkpoint.retention``)."""

from __future__ import annotations

import pytest

from oma.checkpoint.retention import HistoryPolicy, KnownBase, drop_before

BASES = [KnownBase(0, 1, 1_000), KnownBase(40, 14, 5_000), KnownBase(90, 30, 9_000)]


def test_keep_everything_by_default() -> None:
    assert drop_before(HistoryPolicy(), BASES, latest=30, now_ms=10**9) is None


@pytest.mark.parametrize(
    ("keep", "dropped"),
    [
        (1, 40),  # 29 and 30 kept: 29 is rebuilt from base 14, what precedes it goes
        (16, 40),  # 14..30 kept: what precedes base 14 goes
        (17, None),  # 13..30 kept: base 14 does not cover 13, nothing goes
        (100, None),
    ],
)
def test_keep_counts_the_boundaries_behind_the_latest(keep: int, dropped: int | None) -> None:
    assert drop_before(HistoryPolicy(keep=keep), BASES, latest=30, now_ms=10_000) == dropped


def test_an_age_lets_go_what_is_older_than_a_base_that_is_old_enough() -> None:
    policy = HistoryPolicy(max_age_seconds=3)
    assert drop_before(policy, BASES, latest=30, now_ms=9_000) == 40  # cutoff 6,000
    assert drop_before(policy, BASES, latest=30, now_ms=7_000) is None  # cutoff 4,000: only 0


def test_either_limit_lets_a_boundary_go() -> None:
    policy = HistoryPolicy(keep=100, max_age_seconds=3)
    assert drop_before(policy, BASES, latest=30, now_ms=9_000) == 40


@pytest.mark.parametrize("bad", [{"keep": 0}, {"max_age_seconds": 0}, {"max_age_seconds": -1}])
def test_limits_that_keep_nothing_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="history"):
        HistoryPolicy(**bad)  # type: ignore[arg-type]
