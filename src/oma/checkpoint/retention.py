"""How long a checkpoint journal keeps its past boundaries, and what a new base may drop.

A history-keeping journal drops old records only when it writes a base, and only records
before a base it knows (so every boundary it keeps can still be rebuilt from a base before
it): the newest known base that every boundary before it may leave by. A boundary may leave
once it is more than ``keep`` boundaries behind the latest, or older than ``max_age_seconds``;
with neither set (the default), nothing leaves until the checkpoint is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class HistoryPolicy:
    """``keep``: boundaries kept behind the latest (at least 1); ``max_age_seconds``: how long
    a boundary is kept. Either lets a boundary go; ``None`` for both keeps every one."""

    keep: int | None = None
    max_age_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 1:
            raise ValueError(f"history keep is at least 1 boundary, got {self.keep}")
        if self.max_age_seconds is not None and self.max_age_seconds <= 0:
            raise ValueError(f"history maxAgeSeconds is > 0, got {self.max_age_seconds}")


@dataclass(frozen=True)
class KnownBase:
    """A base record of the journal: its number, the boundary it holds and when it was saved
    (milliseconds since the epoch)."""

    number: int
    seq: int
    at: int


def drop_before(
    policy: HistoryPolicy, bases: Iterable[KnownBase], latest: int, now_ms: int
) -> int | None:
    """The record number a new base may drop everything before, or ``None`` (drop nothing).
    ``latest``: the ``seq`` of the boundary being written."""
    if policy.keep is None and policy.max_age_seconds is None:
        return None
    cutoff = now_ms - int(policy.max_age_seconds * 1000) if policy.max_age_seconds else None
    best: int | None = None
    for base in bases:
        # Every boundary before this base leaves by count, or (saved no later than the base)
        # by age: then nothing a reader may still ask for needs the records before it.
        # Kept by count: the latest and the ``keep`` boundaries behind it, seq latest - keep on.
        by_count = policy.keep is not None and base.seq <= latest - policy.keep
        by_age = cutoff is not None and base.at <= cutoff
        if (by_count or by_age) and (best is None or base.number > best):
            best = base.number
    return best if best else None
