"""What the console reads from the API server, as the signed-in user: ApprovalDecisions and
TeamRuns across every namespace the user may list, a run's Events, and a watch that says when
the inbox changed.

Listing across namespaces needs a cluster-wide ``list``; a user allowed only some namespaces
gets them from the session's list (``--namespace``, the sign-in form), each tried alone, a
refused one left out: nobody sees what RBAC does not show them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, cast

from oma_operator.k8s.client import Kube
from oma_operator.k8s.errors import KubeGone
from oma_operator.resources.bodies import DecisionBody, TeamRunBody
from oma_operator.resources.models import GROUP, VERSION

log = logging.getLogger(__name__)
# The API server ends each watch by then (the next starts where it ended): shorter than the
# client's read timeout (k8s.client.TIMEOUT_SECONDS), which a quiet watch must not meet.
WATCH_SECONDS = 25
RETRY_SECONDS = 0.2  # a watch ends when the user's client opens new connections: resume at once
MAX_RETRY_SECONDS = 10.0


def paths(plural: str, namespaces: tuple[str, ...] | None) -> list[str]:
    """The list paths of ``plural`` (None: across every namespace)."""
    if namespaces is None:
        return [f"/apis/{GROUP}/{VERSION}/{plural}"]
    return [f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}" for ns in namespaces]


async def readable(kube: Kube, plural: str, namespaces: tuple[str, ...]) -> list[str]:
    """The list paths the user may read: across namespaces if allowed, else each of theirs
    that RBAC lets them list (asked, never tried: see ``Kube.may``)."""
    if await kube.may("list", GROUP, plural, None):
        return paths(plural, None)
    allowed = [ns for ns in namespaces if await kube.may("list", GROUP, plural, ns)]
    return paths(plural, tuple(allowed))


async def list_at(kube: Kube, paths: list[str]) -> list[dict[str, Any]]:
    """Every item of the lists at ``paths`` (what ``readable`` found)."""
    items: list[dict[str, Any]] = []
    for path in paths:
        items += (await kube.get_json(path)).get("items") or []
    return items


@dataclass(frozen=True)
class InboxLists:
    """Where a user's inbox reads from: asked once per page or live stream, not per change."""

    decisions: list[str]
    teamruns: list[str]  # for the requests' task titles


async def inbox_lists(kube: Kube, namespaces: tuple[str, ...]) -> InboxLists:
    return InboxLists(
        await readable(kube, "approvaldecisions", namespaces),
        await readable(kube, "teamruns", namespaces),
    )


async def decisions_at(kube: Kube, paths: list[str]) -> list[DecisionBody]:
    return cast(list[DecisionBody], await list_at(kube, paths))


async def teamruns_at(kube: Kube, paths: list[str]) -> list[TeamRunBody]:
    return cast(list[TeamRunBody], await list_at(kube, paths))


async def teamruns(kube: Kube, namespaces: tuple[str, ...]) -> list[TeamRunBody]:
    return await teamruns_at(kube, await readable(kube, "teamruns", namespaces))


async def decisions_of_run(kube: Kube, namespace: str, teamrun: str) -> list[DecisionBody]:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions"
    listed = await kube.get_json(path, labelSelector=f"oma.dev/teamrun={teamrun}")
    return cast(list[DecisionBody], listed.get("items") or [])


async def events_of(kube: Kube, namespace: str, name: str, kind: str) -> list[dict[str, Any]]:
    """The core Events about the object, oldest first ([] when the user may not read them)."""
    if not await kube.may("list", "", "events", namespace):
        return []
    selector = f"involvedObject.name={name},involvedObject.kind={kind}"
    listed = await kube.get_json(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector)
    items: list[dict[str, Any]] = listed.get("items") or []
    return sorted(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


async def watch_changes(kube: Kube, path: str, changed: asyncio.Queue[None]) -> None:
    """Put to ``changed`` once at the start and after every change of the list at ``path``,
    until cancelled (list, then watch from its version; a watch too old lists again)."""
    pause = RETRY_SECONDS
    while True:
        try:
            listed = await kube.get_json(path, limit="1")
            version = str((listed.get("metadata") or {}).get("resourceVersion") or "0")
            changed.put_nowait(None)
            pause = RETRY_SECONDS
            while True:
                async for event in kube.watch_lines(path, version, WATCH_SECONDS):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise KubeGone(410, str(obj.get("message") or "watch expired"))
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") != "BOOKMARK":
                        changed.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a refused, expired or broken watch: list and watch again
            log.info("watch of %s ended (%r); listing again in %.1f s", path, exc, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_SECONDS)
