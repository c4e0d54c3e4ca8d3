"""Container environment as the kubelet builds it: envFrom, env, and ``$(VAR)`` expansion."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from devcluster.kube import JSON, ApiError, KubeClient

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ConfigError(Exception):
    """A referenced ConfigMap/Secret/key is missing (the kubelet's CreateContainerConfigError)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubelet ``$(VAR)`` expansion: known vars are replaced, ``$$`` is a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _REF.sub(sub, text)


def field_value(pod: JSON, path: str) -> str:
    """Value of a downward-API ``fieldPath`` on ``pod``."""
    meta: JSON = pod.get("metadata", {})
    spec: JSON = pod.get("spec", {})
    status: JSON = pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP", "127.0.0.1"),
        "status.hostIP": status.get("hostIP", "127.0.0.1"),
    }
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef.fieldPath {path!r}")
    value = simple[path]
    return "" if value is None else str(value)


class ObjectCache:
    """Reads ConfigMaps and Secrets once per pod start."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self._client = client
        self._ns = namespace
        self._cache: dict[tuple[str, str], dict[str, str] | None] = {}

    async def data(self, kind: str, name: str) -> dict[str, str] | None:
        """Decoded ``data`` of a ``configmaps``/``secrets`` object, ``None`` if absent."""
        key = (kind, name)
        if key not in self._cache:
            try:
                obj = await self._client.get(f"/api/v1/namespaces/{self._ns}/{kind}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self._cache[key] = None
            else:
                data: dict[str, str] = dict(obj.get("data") or {})
                if kind == "secrets":
                    data = {
                        k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()
                    }
                else:
                    for k, v in (obj.get("binaryData") or {}).items():
                        data[k] = base64.b64decode(v).decode(errors="replace")
                self._cache[key] = data
        return self._cache[key]

    async def key(self, kind: str, ref: JSON) -> str | None:
        data = await self.data(kind, ref["name"])
        optional = bool(ref.get("optional", False))
        if data is None:
            if optional:
                return None
            raise ConfigError(f'{kind[:-1]} "{ref["name"]}" not found')
        if ref["key"] not in data:
            if optional:
                return None
            raise ConfigError(
                f"couldn't find key {ref['key']} in {kind[:-1]} {self._ns}/{ref['name']}"
            )
        return data[ref["key"]]


async def container_env(
    pod: JSON, container: JSON, objects: ObjectCache, base: Mapping[str, str]
) -> dict[str, str]:
    """``base`` overlaid with the container's ``envFrom`` then ``env`` (later wins)."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for field, kind in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
            ref = source.get(field)
            if ref is None:
                continue
            data = await objects.data(kind, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind[:-1]} "{ref["name"]}" not found')
            env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        src: JSON = var.get("valueFrom") or {}
        value: str | None
        if "fieldRef" in src:
            value = field_value(pod, src["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in src:
            value = await objects.key("secrets", src["secretKeyRef"])
        elif "configMapKeyRef" in src:
            value = await objects.key("configmaps", src["configMapKeyRef"])
        elif "resourceFieldRef" in src:
            value = "0"
        else:
            value = ""
        if value is not None:
            env[name] = value
    return env
