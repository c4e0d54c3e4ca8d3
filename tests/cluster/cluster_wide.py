"""oma's cluster-wide objects on an existing cluster (``E2E_CLUSTER=existing``): the CRDs and the
admission policies of ``deploy/admission-policies.yaml`` that the tests need.

On a user's cluster these may hold the user's TeamRuns and ApprovalDecisions (deleting a CRD
deletes every object of its kind) or guard them (a policy). So the suite:

- installs one only when it is absent, and removes it at the end only if this run installed it
  (the same object: its uid) and, for a CRD, no object of its kind remains (objects in
  namespaces being deleted, the tests' own, are waited for a while); else it stays, and the
  run's summary says so;
- never deletes or replaces one that was there. One that differs from this repository's (an
  older oma, say) stops the tests that need it with a message, unless ``OMA_E2E_CLUSTER_WIDE``
  says otherwise: ``use`` runs against it as it is, ``upgrade`` updates it in place to this
  repository's (an update keeps every object of the kind; it is not undone at the end).

On the local devcluster (the suite's own cluster) none of this applies: the fixtures replace
these objects freely.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

from devcluster.kube import JSON, ApiError, KubeClient
from tests.cluster.helpers import get_or_none

MODE_VARIABLE = "OMA_E2E_CLUSTER_WIDE"
MODES = ("match", "use", "upgrade")
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_IGNORED = ("apiVersion", "kind", "metadata", "status")


class ClusterWideMismatch(Exception):
    """An object of this name is on the cluster and differs from the one the tests need."""


def matches(desired: Any, live: Any) -> bool:
    """Whether ``live`` (as the API server returns it) is ``desired`` (as this repository writes
    it): every value of ``desired`` is in ``live``; keys only ``live`` has are the server's
    defaults, and a zero value (``0``, ``False``, ``""``, empty) may be left out by the server."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(
            matches(value, live[key]) if key in live else not value
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(matches(d, v) for d, v in zip(desired, live, strict=True))
        )
    return bool(desired == live)


def _content(body: JSON) -> JSON:
    return {key: value for key, value in body.items() if key not in _IGNORED}


@dataclass
class Installed:
    """One object this run installed (exactly that one: its uid)."""

    collection: str
    name: str
    uid: str
    kind: str
    # A CRD's objects in every namespace (what must be gone before it may go); else None.
    objects: str | None = None

    @property
    def path(self) -> str:
        return f"{self.collection}/{self.name}"


@dataclass
class ClusterWide:
    """This run's dealings with cluster-wide objects: what it found, installed and removed."""

    mode: str = "match"
    installed: list[Installed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls) -> ClusterWide:
        mode = os.environ.get(MODE_VARIABLE, "") or "match"
        if mode not in MODES:
            raise ValueError(f"{MODE_VARIABLE}={mode!r}: use one of {', '.join(MODES)}")
        return cls(mode)

    def _note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)

    async def ensure(self, kube: KubeClient, collection: str, body: JSON) -> str:
        """Make ``body`` (a cluster-scoped object under ``collection``) available: "installed"
        (it was absent), "found" (there, and matching or ``use``), "upgraded" (``upgrade``).
        Raises ``ClusterWideMismatch`` when it is there, differs, and the mode is ``match``."""
        name, kind = body["metadata"]["name"], body["kind"]
        path = f"{collection}/{name}"
        live = await get_or_none(kube, path)
        if live is None:
            try:
                made = await kube.create(collection, body)
            except ApiError as exc:
                if exc.status != 409:  # someone else created it a moment ago: theirs
                    raise
                live = await kube.get(path)
            else:
                objects = None
                if kind == "CustomResourceDefinition":
                    spec = body["spec"]
                    served = next(v["name"] for v in spec["versions"] if v.get("served", True))
                    objects = f"/apis/{spec['group']}/{served}/{spec['names']['plural']}"
                uid = made["metadata"]["uid"]
                self.installed.append(Installed(collection, name, uid, kind, objects))
                self._note(f"installed {kind} {name} (absent before)")
                return "installed"
        if any(item.uid == live["metadata"]["uid"] for item in self.installed):
            return "found"  # this run's own, from an earlier module
        if matches(_content(body), _content(live)):
            self._note(f"used {kind} {name} as found (it matches this repository's)")
            return "found"
        if self.mode == "use":
            self._note(f"used {kind} {name} as found, though it differs ({MODE_VARIABLE}=use)")
            return "found"
        if self.mode == "upgrade":
            meta = live["metadata"]
            mine = body["metadata"]
            updated = {
                **body,
                "metadata": {
                    "name": name,
                    "resourceVersion": meta["resourceVersion"],
                    "labels": {**(meta.get("labels") or {}), **(mine.get("labels") or {})},
                    "annotations": {
                        **(meta.get("annotations") or {}),
                        **(mine.get("annotations") or {}),
                    },
                },
            }
            await kube.replace(path, updated)
            self._note(f"upgraded {kind} {name} in place ({MODE_VARIABLE}=upgrade)")
            return "upgraded"
        raise ClusterWideMismatch(
            f"E2E_CLUSTER=existing: the cluster's {kind} {name} differs from this repository's "
            "(another oma version installed it?). The suite never deletes or replaces an object "
            f"it did not install. Update it yourself, or set {MODE_VARIABLE}=use to run the "
            f"tests against it as it is, or {MODE_VARIABLE}=upgrade to have the suite update "
            "it in place (objects of its kind stay; the update is not undone)."
        )

    async def release(self, kube: KubeClient, wait: float = 60.0) -> None:
        """Remove what this run installed, newest first: a CRD only once no object of its kind
        remains (those in namespaces or objects being deleted are waited for up to ``wait``
        seconds); an object replaced meanwhile by someone else (another uid) stays. What stays
        for its objects stays listed, for a later call."""
        kept: list[Installed] = []
        for item in reversed(self.installed):
            if item.objects is not None:
                left = await _remaining(kube, item.objects, wait)
                if left:
                    shown = ", ".join(left[:5]) + (" ..." if len(left) > 5 else "")
                    self._note(
                        f"left {item.kind} {item.name} in place (this run installed it, but "
                        f"{len(left)} object(s) of its kind remain: {shown})"
                    )
                    kept.insert(0, item)
                    continue
            options: JSON = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": item.uid},
            }
            try:
                await kube.delete(item.path, options)
            except ApiError as exc:
                if exc.status == 404:
                    self._note(f"{item.kind} {item.name}, installed by this run, was gone")
                    continue
                if exc.status == 409:  # another object of that name now
                    self._note(f"left {item.kind} {item.name}: replaced by someone else")
                    continue
                raise
            self._note(f"removed {item.kind} {item.name} (installed by this run)")
        self.installed = kept


async def _remaining(kube: KubeClient, objects: str, wait: float) -> list[str]:
    """The objects at ``objects`` (every namespace) that stay: none once all are gone; waits
    while every one left is going (it, or its namespace, is being deleted)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            items = (await kube.get(objects)).get("items") or []
        except ApiError as exc:
            if exc.status == 404:  # the kind is not served (any more): nothing of it remains
                return []
            raise
        names = [
            f"{item['metadata'].get('namespace', '')}/{item['metadata']['name']}".lstrip("/")
            for item in items
        ]
        if not items:
            return []
        going = [await _going(kube, item) for item in items]
        if not all(going) or time.monotonic() > deadline:
            return names
        await asyncio.sleep(1)


async def _going(kube: KubeClient, item: JSON) -> bool:
    meta = item["metadata"]
    if meta.get("deletionTimestamp"):
        return True
    if not meta.get("namespace"):
        return False
    namespace = await get_or_none(kube, f"/api/v1/namespaces/{meta['namespace']}")
    return namespace is None or bool(namespace["metadata"].get("deletionTimestamp"))
