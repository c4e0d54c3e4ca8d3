"""How the cluster tests reach an existing cluster (``E2E_CLUSTER=existing``): as the product does.

The local devcluster's own kubeconfigs (client certificates it minted) are read by devcluster's
small client. A user's cluster is reached the way ``oma`` and the operator reach it: the files in
``$KUBECONFIG`` merged by kubectl's rules (``oma_operator.k8s.kubeconfig.merged``), a context chosen
(``OMA_E2E_CONTEXT``, else the merged current-context), and requests sent by kr8s through the
product's client (``oma_operator.k8s.client.Kube``), which runs exec credential plugins (EKS, GKE,
AKS), re-authenticates when a token expires, and reads certificates and tokens from files or
inline data.

``existing_kubeconfig`` writes that one context (cluster, user, context entry, paths made
absolute) to one private file, so that every part of a test run agrees on the cluster: the
test process's client, kubectl and helm (``--kubeconfig`` takes one file), and the operator
processes the tests start (``KUBECONFIG``). ``ProductKubeClient`` gives the tests devcluster's
``KubeClient`` interface over the product's client.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import kr8s
import yaml

from devcluster.kube import JSON, ApiError, KubeClient
from oma_operator.k8s.client import Kube
from oma_operator.k8s.kubeconfig import KubeconfigError, merged

CONTEXT_VARIABLE = "OMA_E2E_CONTEXT"


def existing_kubeconfig(listed: str, context: str | None, target: Path) -> Path:
    """The kubeconfig files in ``listed`` (``$KUBECONFIG``: paths joined with ``os.pathsep``;
    empty: ``~/.kube/config``) merged as kubectl merges them, cut down to ``context`` (default:
    the current-context) with its cluster and user, written to ``target`` (mode 0600).
    Raises ``KubeconfigError`` naming what is missing."""
    paths = [Path(p).expanduser() for p in (listed or "~/.kube/config").split(os.pathsep) if p]
    document = merged(paths)
    where = os.pathsep.join(str(p) for p in paths)
    name = context or document.get("current-context")
    if not name:
        raise KubeconfigError(f"{where}: no current-context; name one with {CONTEXT_VARIABLE}")
    chosen = _entry(document, "contexts", name, where)
    inner = chosen.get("context") or {}
    cluster = _entry(document, "clusters", str(inner.get("cluster", "")), where)
    user = inner.get("user")
    one: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [_entry(document, "users", str(user), where)] if user else [],
        "contexts": [chosen],
        "current-context": name,
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(yaml.safe_dump(one, sort_keys=False))
    return target


def _entry(document: dict[str, Any], section: str, name: str, where: str) -> dict[str, Any]:
    for entry in document.get(section) or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry
            return found
    raise KubeconfigError(f"{where}: no entry named {name!r} in {section}")


class ProductKubeClient(KubeClient):
    """devcluster's ``KubeClient`` (what the tests call) over the product's client: requests go
    out through kr8s with the product's connection, so exec plugins, contexts and merged
    kubeconfigs work and an expired token is renewed. Errors are devcluster's ``ApiError``."""

    def __init__(
        self,
        kube: Kube,
        *,
        impersonate_user: str | None = None,
        impersonate_groups: Sequence[str] = (),
    ) -> None:
        # Not KubeClient.__init__: that one opens an httpx client from a devcluster KubeConfig.
        self.kube = kube
        self._headers: list[tuple[str, str]] = [("Accept", "application/json")]
        if impersonate_user:
            self._headers.append(("Impersonate-User", impersonate_user))
            self._headers += [("Impersonate-Group", g) for g in impersonate_groups]

    @classmethod
    async def connect(
        cls,
        kubeconfig: Path,
        *,
        impersonate_user: str | None = None,
        impersonate_groups: Sequence[str] = (),
    ) -> ProductKubeClient:
        kube = await Kube.connect(kubeconfig=str(kubeconfig))
        return cls(kube, impersonate_user=impersonate_user, impersonate_groups=impersonate_groups)

    async def __aenter__(self) -> ProductKubeClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.kube.aclose()

    @contextlib.asynccontextmanager
    async def _send(
        self, method: str, path: str, *, stream: bool = False, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        base, _, last = path.rpartition("/")
        if not base:  # kr8s builds every URL as base/version/url
            raise ValueError(f"{path}: only paths under /api or /apis are supported")
        headers = [*self._headers, *kwargs.pop("headers", [])]
        try:
            async with self.kube.api.call_api(
                method, version="", base=base, url=last, stream=stream, headers=headers, **kwargs
            ) as response:
                yield response
        except (kr8s.ServerError, httpx.HTTPStatusError) as exc:
            # kr8s authenticated again and retried on 401/403 before this.
            failed: httpx.Response | None = exc.response
            if failed is None:
                raise
            try:
                body: JSON | str = failed.json()
            except ValueError:
                body = failed.text
            raise ApiError(failed.status_code, body, method, path) from None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        content = None if body is None else json.dumps(body).encode()
        headers = [("Content-Type", content_type)] if content is not None else []
        async with self._send(
            method, path, content=content, params=params, headers=headers
        ) as response:
            if not response.content:
                return {}
            data: JSON = response.json()
            return data

    async def watch(
        self, path: str, resource_version: str, *, timeout_seconds: int = 240, **params: str
    ) -> AsyncIterator[JSON]:
        query: dict[str, str | int] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            **params,
        }
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 30.0)
        async with self._send("GET", path, stream=True, params=query, timeout=timeout) as response:
            async for line in response.aiter_lines():
                if line.strip():
                    event: JSON = json.loads(line)
                    yield event
