"""Unfinished TeamRuns as the operator last knew them: the watch's copy (``handlers.
teamrun_bodies``, a kopf index), or the API server's answer to the operator's own last status
write when that is newer (the watch shows it a moment later).

A write that must start from the current object (recording an attempt's end, starting a queued
run) starts from this copy with its ``resourceVersion`` as a precondition, and reads the object
only when the API server answers that it changed since (409). Taking the operator's own writes
into account avoids the conflicts a lagging watch caused (a progress write, then the attempt's
end conditioned on the copy before it: 409, a read, a second write): under load the watch runs
seconds behind, and a run's writes follow each other closely.

Which copy is newer is told by ``resourceVersion``: comparable as integers since Kubernetes
1.35 (KEP-5504; every etcd-backed API server writes them so). One that is not an integer is
not compared, and the watch's copy is used, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from oma_operator.resources.bodies import TeamRunBody, teamrun_view
from oma_operator.resources.phases import FINAL_PHASES

Key = tuple[str, str]  # namespace, name
BodyIndex = Mapping[Key, Iterable[TeamRunBody]]


def newer(candidate: str | None, than: str | None) -> bool:
    """Whether resourceVersion ``candidate`` is known to be newer than ``than``."""
    if not candidate or not than or not candidate.isdigit() or not than.isdigit():
        return False
    return int(candidate) > int(than)


class WatchedTeamRuns:
    def __init__(self) -> None:
        self._index: BodyIndex | None = None
        # The operator's own last write of a TeamRun, kept only until the watch shows it (or
        # something newer): at most the runs written in the last moment.
        self._written: dict[Key, TeamRunBody] = {}

    def attach(self, index: BodyIndex | None) -> None:
        self._index = index

    def _watched(self, key: Key) -> TeamRunBody | None:
        if self._index is None:
            return None
        for body in self._index.get(key, ()):
            return body
        return None

    def get(self, namespace: str, name: str) -> TeamRunBody | None:
        """The newest body known: the watch's, or the operator's own last write when newer
        (a run the operator just ended shows its end here before the watch does); None when
        not seen, deleted, finished (as the watch shows it), or no watch yet."""
        key = (namespace, name)
        watched = self._watched(key)
        written = self._written.get(key)
        if written is None:
            return watched
        if watched is None:
            if _final(written):  # the watch showed the end: finished runs are not kept
                del self._written[key]
                return None
            return written
        if newer(
            written["metadata"].get("resourceVersion"), watched["metadata"].get("resourceVersion")
        ):
            return written
        del self._written[key]  # the watch caught up
        return watched

    def wrote(self, body: TeamRunBody) -> None:
        """The API server's answer to a write of the TeamRun (its status)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if meta.get("deletionTimestamp"):
            self._written.pop(key, None)
            return
        known = self._written.get(key) or self._watched(key)
        if known is None or newer(
            meta.get("resourceVersion"), (known.get("metadata") or {}).get("resourceVersion")
        ):
            kept = {k: v for k, v in meta.items() if k != "managedFields"}  # most of its size
            self._written[key] = teamrun_view({**body, "metadata": kept})

    def seen(self, body: TeamRunBody) -> None:
        """A watch event of the TeamRun: a write it shows (or passed) is no longer kept."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        written = self._written.get(key)
        if written is not None and not newer(
            written["metadata"].get("resourceVersion"), meta.get("resourceVersion")
        ):
            del self._written[key]

    def forget(self, namespace: str, name: str) -> None:
        """The TeamRun was deleted."""
        self._written.pop((namespace, name), None)


def _final(body: TeamRunBody) -> bool:
    return (body.get("status") or {}).get("phase") in FINAL_PHASES


WATCHED = WatchedTeamRuns()
