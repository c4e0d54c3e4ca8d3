"""The only module that talks to the Kubernetes API (httpx; kubeconfig or in-cluster account)."""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from oma.errors import OmaError
from oma_operator.models import GROUP, VERSION

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_IN_FLIGHT = 32
# Keep as many connections alive as may be in use, so bursts reuse them (no new TLS handshakes).
LIMITS = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)


def in_cluster_server(environ: Mapping[str, str], account: Path) -> str | None:
    """The API server's address inside a pod, as client-go finds it: the service address the
    kubelet puts in the environment, not a DNS name (which needs cluster DNS and its domain).
    None outside a pod (no such variable or no service account token)."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    if not host or not (account / "token").exists():
        return None
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class KubeError(OmaError):
    code = "KUBE_API"

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"Kubernetes API answered {status}: {message}")


class Kube:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.http = client
        # httpcore assigns queued requests to connections at a cost that grows with the queue
        # (encode/httpcore#1035): hundreds of concurrent requests spent half the operator's CPU
        # there. Requests beyond this many wait here instead, cheaply.
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)

    @classmethod
    def from_environment(cls) -> Kube:
        server = in_cluster_server(os.environ, SA_DIR)
        if server is not None:
            context = ssl.create_default_context(cafile=str(SA_DIR / "ca.crt"))
            token = (SA_DIR / "token").read_text().strip()
            return cls(
                httpx.AsyncClient(
                    base_url=server,
                    verify=context,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=30,
                    limits=LIMITS,
                )
            )
        return cls.from_kubeconfig(Path(os.environ.get("KUBECONFIG", "~/.kube/config")))

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        config = yaml.safe_load(path.expanduser().read_text())
        context_name = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        temporary: list[str] = []  # inline -data written out for ssl; removed once loaded
        try:
            # Without a CA in the kubeconfig, the server's certificate is publicly trusted.
            ca = any(k in cluster for k in ("certificate-authority", "certificate-authority-data"))
            ssl_context = ssl.create_default_context(
                cafile=_file(cluster, "certificate-authority", temporary) if ca else None
            )
            if "client-certificate" in user or "client-certificate-data" in user:
                ssl_context.load_cert_chain(
                    _file(user, "client-certificate", temporary),
                    _file(user, "client-key", temporary),
                )
        finally:
            for name in temporary:
                Path(name).unlink(missing_ok=True)
        headers = {}
        if "token" in user:
            headers["Authorization"] = f"Bearer {user['token']}"
        return cls(
            httpx.AsyncClient(
                base_url=cluster["server"],
                verify=ssl_context,
                headers=headers,
                timeout=30,
                limits=LIMITS,
            )
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        async with self._in_flight:
            response = await self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubeError(response.status_code, message)
        body: dict[str, Any] = response.json() if response.content else {}
        return body

    # -- pods ----------------------------------------------------------------------------------
    async def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", f"/api/v1/namespaces/{namespace}/pods", json=pod)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_pods(self, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        """Pods with ``label_selector`` in ``namespace`` (None: every namespace)."""
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        body = await self._call("GET", path, params={"labelSelector": label_selector})
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Ask for a graceful delete; a pod already gone is fine."""
        try:
            await self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> None:
        pod = await self.get_pod(namespace, name)
        if pod is None or finalizer not in pod["metadata"].get("finalizers", []):
            return
        kept = [f for f in pod["metadata"]["finalizers"] if f != finalizer]
        patch = {
            "metadata": {"finalizers": kept, "resourceVersion": pod["metadata"]["resourceVersion"]}
        }
        await self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )

    async def add_finalizer(self, pod: dict[str, Any], finalizer: str) -> None:
        """Add ``finalizer`` to ``pod`` as it was seen (its resourceVersion is a precondition).
        A pod changed since (409), gone (404) or being deleted (422: it takes no new
        finalizers) is left alone; its next event tells what it is now."""
        meta = pod["metadata"]
        patch = {
            "metadata": {
                "finalizers": [*(meta.get("finalizers") or []), finalizer],
                "resourceVersion": meta["resourceVersion"],
            }
        }
        try:
            await self._call(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                json=patch,
                headers={"Content-Type": "application/merge-patch+json"},
            )
        except KubeError as exc:
            if exc.status not in (404, 409, 422):
                raise

    # -- the operator's own Deployment (the chart's pre-delete hook) ------------------------------
    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        await self._call(
            "PATCH",
            f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            json={"spec": {"replicas": replicas}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    # -- teamruns ------------------------------------------------------------------------------
    async def patch_teamrun_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch the status; with ``resource_version`` it fails (409) if anyone wrote
        since, which makes a one-time transition (such as resuming) happen exactly once."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}/status"
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._call(
            "PATCH", path, json=body, headers={"Content-Type": "application/merge-patch+json"}
        )

    # -- approval decisions --------------------------------------------------------------------
    async def create_decision(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create it and return it as stored; 409 when the name is taken."""
        return await self._call(
            "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions", json=body
        )

    async def delete_decision(self, namespace: str, name: str, uid: str) -> None:
        """Delete exactly the resource with ``uid`` (a newer one of that name is left alone);
        gone already is fine."""
        try:
            await self._call(
                "DELETE",
                f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}",
                json={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
            )
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    async def list_decisions(self, namespace: str, teamrun: str) -> list[dict[str, Any]]:
        body = await self._call(
            "GET",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions",
            params={"labelSelector": f"oma.dev/teamrun={teamrun}"},
        )
        items: list[dict[str, Any]] = body.get("items", [])
        return items

    async def get_decision(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(
                "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}"
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_decision_spec(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        """Merge-patch the spec only if nobody wrote since ``resource_version`` (else 409), so a
        decision is never laid over one made meanwhile by someone else."""
        return await self._call(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}",
            json={"metadata": {"resourceVersion": resource_version}, "spec": spec},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    async def patch_decision_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Merge-patch the status; ``uid`` / ``resource_version`` make it fail (409) on another
        resource of that name, or on one written since."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}/status"
        preconditions = {
            key: value
            for key, value in (("uid", uid), ("resourceVersion", resource_version))
            if value is not None
        }
        body: dict[str, Any] = {"status": status}
        if preconditions:
            body["metadata"] = preconditions
        await self._call(
            "PATCH", path, json=body, headers={"Content-Type": "application/merge-patch+json"}
        )

    # -- events --------------------------------------------------------------------------------
    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        await self._call("POST", f"/api/v1/namespaces/{namespace}/events", json=body)

    # -- secrets -------------------------------------------------------------------------------
    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = await self._call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        data = (secret.get("data") or {}).get(key)
        if data is None:
            raise KubeError(404, f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    async def get_teamrun(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(
                "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}"
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    # -- identity ------------------------------------------------------------------------------
    async def self_subject_review(self) -> dict[str, Any]:
        """Who the API server takes us for (``status.userInfo``: username, groups)."""
        body = await self._call(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        user: dict[str, Any] = (body.get("status") or {}).get("userInfo") or {}
        return user


def _file(section: dict[str, Any], field: str, temporary: list[str]) -> str:
    """A kubeconfig file reference, or its inline ``-data`` written to a private temp file
    (its name appended to ``temporary`` for the caller to remove)."""
    if field in section:
        return str(section[field])
    data = base64.b64decode(section[f"{field}-data"])
    handle = tempfile.NamedTemporaryFile(prefix="oma-kube-", delete=False)  # noqa: SIM115
    temporary.append(handle.name)
    with handle:
        os.chmod(handle.name, 0o600)  # before the key material is in it
        handle.write(data)
    return handle.name
