"""A pod's files on the host: one root directory per pod, every container path under it.

Rule: an absolute path ``P`` from the pod spec (a volume ``mountPath``, the
``terminationMessagePath``, ``workingDir``) is placed at ``$DEVCLUSTER_POD_ROOT/P``.
Volumes are materialized in ``<root>/.volumes/<name>``; each mount is a symlink from
``<root>/<mountPath>`` (or a file within the volume for ``subPath``) to it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from devcluster.kube import JSON, KubeClient
from devcluster.podenv import ConfigError, ObjectCache, field_value

ROOT_ENV = "DEVCLUSTER_POD_ROOT"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class PodFiles:
    """The directory tree of one pod."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def host_path(self, container_path: str) -> Path:
        """Where the container path ``container_path`` lives on the host."""
        return self.root / container_path.lstrip("/")

    def volume_dir(self, name: str) -> Path:
        return self.root / ".volumes" / name

    def log_path(self, container: str) -> Path:
        return self.root / ".logs" / f"{container}.log"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def termination_file(self, container: JSON) -> Path:
        """Empty the container's termination message file before a start; return it."""
        path = self.host_path(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    def mount(self, container: JSON) -> None:
        """Link each ``volumeMounts`` entry of ``container`` to its volume directory."""
        for vm in container.get("volumeMounts") or []:
            target = self.volume_dir(vm["name"])
            if vm.get("subPath"):
                target = target / vm["subPath"]
            link = self.host_path(vm["mountPath"])
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.is_dir():
                shutil.rmtree(link)
            link.symlink_to(target)

    async def materialize(self, pod: JSON, client: KubeClient, objects: ObjectCache) -> None:
        """Write every volume of ``pod`` (idempotent: rewrites contents)."""
        for volume in pod["spec"].get("volumes") or []:
            await self._volume(pod, volume, client, objects)

    async def _volume(
        self, pod: JSON, volume: JSON, client: KubeClient, objects: ObjectCache
    ) -> None:
        vdir = self.volume_dir(volume["name"])
        if "hostPath" in volume:
            _link_host_path(vdir, volume["hostPath"])
            return
        vdir.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            return
        if "configMap" in volume:
            await self._keys(vdir, "configmaps", volume["configMap"], objects)
        elif "secret" in volume:
            src = dict(volume["secret"], name=volume["secret"]["secretName"])
            await self._keys(vdir, "secrets", src, objects)
        elif "downwardAPI" in volume:
            self._downward(vdir, pod, volume["downwardAPI"].get("items") or [])
        elif "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                await self._projection(vdir, pod, source, client, objects)
        else:
            raise ConfigError(f"volume {volume['name']!r}: unsupported volume type")

    async def _keys(self, vdir: Path, kind: str, src: JSON, objects: ObjectCache) -> None:
        data = await objects.data(kind, src["name"])
        if data is None:
            if src.get("optional"):
                return
            raise ConfigError(f'{kind[:-1]} "{src["name"]}" not found')
        items: list[JSON] = src.get("items") or [{"key": k, "path": k} for k in data]
        mode = int(src.get("defaultMode", 0o644))
        for item in items:
            if item["key"] not in data:
                if src.get("optional"):
                    continue
                raise ConfigError(f'{kind[:-1]} "{src["name"]}" has no key {item["key"]!r}')
            _write(vdir / item["path"], data[item["key"]].encode(), int(item.get("mode", mode)))

    def _downward(self, vdir: Path, pod: JSON, items: list[JSON]) -> None:
        for item in items:
            if "fieldRef" in item:
                _write(
                    vdir / item["path"], field_value(pod, item["fieldRef"]["fieldPath"]).encode()
                )

    async def _projection(
        self, vdir: Path, pod: JSON, source: JSON, client: KubeClient, objects: ObjectCache
    ) -> None:
        if "configMap" in source:
            await self._keys(vdir, "configmaps", source["configMap"], objects)
        elif "secret" in source:
            await self._keys(vdir, "secrets", source["secret"], objects)
        elif "downwardAPI" in source:
            self._downward(vdir, pod, source["downwardAPI"].get("items") or [])
        elif "serviceAccountToken" in source:
            token = await _token(pod, source["serviceAccountToken"], client)
            _write(vdir / source["serviceAccountToken"]["path"], token.encode(), 0o600)


async def _token(pod: JSON, src: JSON, client: KubeClient) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    sa = spec.get("serviceAccountName") or "default"
    req: dict[str, Any] = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": int(src.get("expirationSeconds", 3607)),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    if src.get("audience"):
        req["spec"]["audiences"] = [src["audience"]]
    resp = await client.create(
        f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token", req
    )
    return str(resp["status"]["token"])


def _link_host_path(vdir: Path, src: JSON) -> None:
    """A hostPath volume is a symlink to the real host path (created for the *OrCreate types)."""
    host = Path(src["path"])
    if src.get("type") == "DirectoryOrCreate":
        host.mkdir(parents=True, exist_ok=True)
    elif src.get("type") == "FileOrCreate":
        host.parent.mkdir(parents=True, exist_ok=True)
        host.touch(exist_ok=True)
    vdir.parent.mkdir(parents=True, exist_ok=True)
    if not vdir.is_symlink():
        vdir.symlink_to(host)


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
