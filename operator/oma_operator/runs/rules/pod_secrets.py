"""Which Secrets a runner pod reads, and which of them its namespace lacks (pure).

A pod whose Secret is missing waits in ``CreateContainerConfigError``; the kubelet's message
names the Secret only on a quiet node: under load it says "failed to sync secret cache: timed
out waiting for the condition". The start timeout's message names the missing ones itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from oma_operator.resources.bodies import PodBody


@dataclass(frozen=True)
class SecretRef:
    """``key`` None: the whole Secret (``envFrom``, a volume)."""

    name: str
    key: str | None = None


def secret_refs(pod: PodBody) -> list[SecretRef]:
    """The Secrets (and keys) the pod's containers need to start, optional ones left out."""
    spec = pod.get("spec") or {}
    found: list[SecretRef] = []
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and not ref.get("optional") and ref.get("name"):
                found.append(SecretRef(ref["name"], ref.get("key")))
        for source in container.get("envFrom") or []:
            ref = source.get("secretRef")
            if ref and not ref.get("optional") and ref.get("name"):
                found.append(SecretRef(ref["name"]))
    for volume in spec.get("volumes") or []:
        ref = volume.get("secret")
        if ref and not ref.get("optional") and ref.get("secretName"):
            found.append(SecretRef(ref["secretName"]))
    return list(dict.fromkeys(found))


def missing_secrets(refs: list[SecretRef], keys: Mapping[str, frozenset[str] | None]) -> str:
    """What of ``refs`` is missing, given each Secret's keys (None: no such Secret; a name not
    in ``keys``: not known, left out); '' when nothing is."""
    gone: list[str] = []
    for ref in refs:
        if ref.name not in keys:
            continue
        held = keys[ref.name]
        if held is None:
            gone.append(f"Secret {ref.name} does not exist")
        elif ref.key is not None and ref.key not in held:
            gone.append(f"Secret {ref.name} has no key {ref.key}")
    return "; ".join(dict.fromkeys(gone))
