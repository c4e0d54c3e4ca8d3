"""Unfinished TeamRuns as the operator's watch last showed them (``handlers.teamrun_bodies``,
a kopf index).

A write that must start from the current object (recording an attempt's end, starting a queued
run) starts from this copy with its ``resourceVersion`` as a precondition, and reads the object
only when the API server answers that it changed since (409): one request instead of two when the
watch is current, and never a write over a change it did not see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from oma_operator.resources.bodies import TeamRunBody

Key = tuple[str, str]  # namespace, name
BodyIndex = Mapping[Key, Iterable[TeamRunBody]]


class WatchedTeamRuns:
    def __init__(self) -> None:
        self._index: BodyIndex | None = None

    def attach(self, index: BodyIndex | None) -> None:
        self._index = index

    def get(self, namespace: str, name: str) -> TeamRunBody | None:
        """The last body the watch showed, or None (not seen, deleted, or no watch yet)."""
        if self._index is None:
            return None
        for body in self._index.get((namespace, name), ()):
            return body
        return None


WATCHED = WatchedTeamRuns()
