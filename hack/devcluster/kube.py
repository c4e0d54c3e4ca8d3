"""A small async Kubernetes REST client on httpx (enough for tests and the node agent)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import httpx

from devcluster.kubeconfig import KubeConfig, load_kubeconfig

JSON = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]
_PATCH_CONTENT = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class ApiError(Exception):
    """A non-2xx answer; ``message`` and ``reason`` come from the server's Status."""

    def __init__(self, status: int, body: JSON | str, method: str, path: str) -> None:
        self.status = status
        self.body = body
        if isinstance(body, dict):
            self.message = str(body.get("message", ""))
            self.reason = str(body.get("reason", ""))
        else:
            self.message, self.reason = body, ""
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


class KubeClient:
    """Async client bound to one kubeconfig context; use as an async context manager."""

    def __init__(
        self,
        config: KubeConfig | None = None,
        *,
        impersonate_user: str | None = None,
        impersonate_groups: Sequence[str] = (),
        timeout: float = 30.0,
    ) -> None:
        self.config = config or load_kubeconfig()
        headers: list[tuple[str, str]] = [("Accept", "application/json")]
        if self.config.token:
            headers.append(("Authorization", f"Bearer {self.config.token}"))
        if impersonate_user:
            headers.append(("Impersonate-User", impersonate_user))
            headers += [("Impersonate-Group", g) for g in impersonate_groups]
        self._http = httpx.AsyncClient(
            base_url=self.config.server,
            verify=self.config.ssl_context(),
            headers=headers,
            timeout=timeout,
        )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        """Send one request; return the decoded JSON body or raise ``ApiError``."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        resp = await self._http.request(
            method, path, content=content, params=params, headers=headers
        )
        if resp.status_code >= 400:
            try:
                err: JSON | str = resp.json()
            except ValueError:
                err = resp.text
            raise ApiError(resp.status_code, err, method, path)
        if not resp.content:
            return {}
        data: JSON = resp.json()
        return data

    async def get(self, path: str, **params: str | int) -> JSON:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, obj: JSON) -> JSON:
        return await self.request("POST", path, body=obj)

    async def replace(self, path: str, obj: JSON) -> JSON:
        return await self.request("PUT", path, body=obj)

    async def patch(self, path: str, patch: Any, kind: PatchType = "merge") -> JSON:
        return await self.request("PATCH", path, body=patch, content_type=_PATCH_CONTENT[kind])

    async def delete(self, path: str, options: JSON | None = None) -> JSON:
        return await self.request("DELETE", path, body=options)

    async def delete_if_present(self, path: str, options: JSON | None = None) -> bool:
        """Delete ``path``; False when it was already gone.

        Checking first and deleting after races with whatever else deletes it (a finalizer
        finishing, a namespace going), so a 404 here is an answer, not an error.
        """
        try:
            await self.delete(path, options)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def exists(self, path: str) -> bool:
        try:
            await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def watch(
        self, path: str, resource_version: str, *, timeout_seconds: int = 240, **params: str
    ) -> AsyncIterator[JSON]:
        """Yield watch events (``{"type": ..., "object": ...}``) until the server ends it.

        An ``ERROR`` event (e.g. 410 Gone) is yielded like any other; the caller relists.
        """
        query: dict[str, str | int] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            **params,
        }
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 30.0)
        async with self._http.stream("GET", path, params=query, timeout=timeout) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise ApiError(resp.status_code, resp.text, "WATCH", path)
            async for line in resp.aiter_lines():
                if line.strip():
                    event: JSON = json.loads(line)
                    yield event
