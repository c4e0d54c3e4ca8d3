"""The only module that talks to the Kubernetes API, through kr8s (a maintained async client).

kr8s finds the credentials as kubectl does: ``$KUBECONFIG`` (several files merged) or
``~/.kube/config``, the current or a given context, tokens, client certificates and exec
credential plugins (EKS, GKE, AKS); in a pod, its service account, whose projected token is
re-read when the API server refuses the old one. Requests go out as raw JSON through
``call_api``; this module keeps what the operator needs on top: a bound on requests in flight,
impersonation, and typed errors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, cast

import httpx
import kr8s
import kr8s.asyncio

from oma_operator.k8s.errors import (
    CHANGED_OR_GONE,
    KubeConflict,
    KubeInvalid,
    KubeNotFound,
    kube_error,
)
from oma_operator.k8s.kubeconfig import merged
from oma_operator.k8s.ratelimit import RateLimit
from oma_operator.resources.bodies import (
    DecisionBody,
    LeaseBody,
    ObjectMeta,
    PodBody,
    TeamRunBody,
)
from oma_operator.resources.models import GROUP, VERSION

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Requests in flight at once: within httpx's default of 20 kept-alive connections, so a burst
# reuses them instead of opening (a TLS handshake each) and closing the ones over 20 (with 32,
# 4 % of the operator's CPU at scale went to new connections). At the rate limit's 100
# requests a second and 20-50 ms each, 16 are plenty.
MAX_IN_FLIGHT = 16
TIMEOUT_SECONDS = 30  # per request; kr8s sets none


def _kubeconfig(given: str | None) -> dict[str, Any] | None:
    listed = given or os.environ.get("KUBECONFIG") or "~/.kube/config"
    paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return merged(paths) if any(p.is_file() for p in paths) else None


class Kube:
    def __init__(
        self,
        api: kr8s.asyncio.Api,
        *,
        impersonate: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self.api = api
        self._context = context
        self._namespace = namespace
        self._headers = {"Impersonate-User": impersonate} if impersonate else {}
        # httpcore assigns queued requests to connections at a cost that grows with the queue
        # (encode/httpcore#1035): hundreds of concurrent requests spent half the operator's CPU
        # there. Requests beyond this many wait here instead, cheaply.
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.rate_limit: RateLimit | None = None  # the operator's (``limit_rate``); None: none
        # Told every TeamRun as a status write left it (the operator: ``k8s.watched``).
        self.teamrun_written: Callable[[TeamRunBody], None] | None = None

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        impersonate: str | None = None,
        serviceaccount: str | None = None,
    ) -> Kube:
        """A client for the cluster the kubeconfig (or, in a pod, the service account) names;
        ``kubeconfig`` may list several files as ``$KUBECONFIG`` does, ``context`` pick one of
        its contexts, ``impersonate`` act as another user (``Impersonate-User``, which the
        caller's RBAC must allow). Raises ``ValueError`` when no credentials are found."""
        # The files merged as kubectl merges them (kubeconfig.py); none: the service account.
        document = _kubeconfig(kubeconfig)
        # Not kr8s.api(): that one also asks the server for its version (a request per
        # connect) and shares instances between callers, whose aclose would close ours.
        api = kr8s.asyncio.Api(
            kubeconfig=document,
            context=context,
            serviceaccount=serviceaccount,
            bypass_factory=True,
        )
        await api.auth.reauthenticate()
        api.timeout = TIMEOUT_SECONDS
        own: str | None = None
        if not api.auth.active_context:  # the service account's (kr8s does not read it)
            path = Path(serviceaccount or SA_DIR) / "namespace"
            own = path.read_text().strip() if path.is_file() else None
        return cls(api, impersonate=impersonate, context=context, namespace=own)

    @classmethod
    async def with_token(cls, server: str, token: str, ca_file: str | None = None) -> Kube:
        """A client that acts as whoever ``token`` (a bearer token: a service account's, an
        OIDC id token the API server accepts) belongs to, on ``server``."""
        cluster: dict[str, str] = {"server": server}
        if ca_file:
            cluster["certificate-authority"] = ca_file
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "user", "context": {"cluster": "cluster", "user": "user"}}],
            "current-context": "user",
        }
        api = kr8s.asyncio.Api(kubeconfig=document, bypass_factory=True)
        await api.auth.reauthenticate()
        api.timeout = TIMEOUT_SECONDS
        return cls(api, context="user")

    def limit_rate(self, qps: float, burst: int) -> None:
        """At most ``qps`` requests a second from now on, ``burst`` at once (``ratelimit``)."""
        self.rate_limit = RateLimit(qps, burst)

    @property
    def server(self) -> str:
        return str(self.api.auth.server)

    @property
    def namespace(self) -> str:
        """The namespace of the context in use (or the service account's), else ``default``,
        as kubectl picks it (kr8s takes the current context's even for another context)."""
        auth = self.api.auth
        if self._namespace:
            return self._namespace
        if self._context and getattr(auth, "kubeconfig", None) is not None:
            chosen = auth.kubeconfig.get_context(self._context).get("namespace")
            return str(chosen) if chosen else "default"
        return str(auth.namespace)

    async def aclose(self) -> None:
        session = getattr(self.api, "_session", None)
        if session is not None and not session.is_closed:
            await session.aclose()
        # kr8s writes a kubeconfig's inline key, certificate and CA (*-data) to temporary files
        # and leaves them: remove them with the client, a private key most of all.
        auth = self.api.auth
        user, cluster = getattr(auth, "_user", {}) or {}, getattr(auth, "_cluster", {}) or {}
        for inline, path in (
            ("client-key-data" in user, auth.client_key_file),
            ("client-certificate-data" in user, auth.client_cert_file),
            ("certificate-authority-data" in cluster, auth.server_ca_file),
        ):
            if inline and path:
                Path(str(path)).unlink(missing_ok=True)  # noqa: ASYNC240 - a local temp file

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        base, _, last = path.rpartition("/")
        headers = {**self._headers, **kwargs.pop("headers", {})}
        if self.rate_limit is not None:
            await self.rate_limit.acquire()
        try:
            async with (
                self._in_flight,
                self.api.call_api(
                    method, version="", base=base, url=last, headers=headers, **kwargs
                ) as response,
            ):
                decoded: dict[str, Any] = response.json() if response.content else {}
                return decoded
        except (kr8s.APITimeoutError, kr8s.ConnectionClosedError) as exc:
            raise kube_error(0, f"no answer: {exc or type(exc).__name__}") from None
        except kr8s.ExecError as exc:  # the kubeconfig's credential plugin failed
            raise kube_error(401, f"the credential plugin failed: {exc}") from None
        except (kr8s.ServerError, httpx.HTTPStatusError) as exc:
            # kr8s re-authenticated and tried again on 401/403 before this.
            failed: httpx.Response | None = exc.response
            if failed is None:
                raise kube_error(0, str(exc)) from None
            try:
                message = failed.json().get("message", failed.text)
            except ValueError:
                message = failed.text
            raise kube_error(failed.status_code, message) from None

    async def get_json(self, path: str, **params: str) -> dict[str, Any]:
        """GET ``path`` (a list, an object) as the user this client acts for."""
        return await self._call("GET", path, params=params)

    async def watch_lines(
        self, path: str, resource_version: str, seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The watch events of the list at ``path`` after ``resource_version``, for at most
        ``seconds`` (the API server then ends the watch; watch again from the last one)."""
        base, _, last = path.rpartition("/")
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(seconds),
            "allowWatchBookmarks": "true",
        }
        try:  # not bounded by _in_flight: a watch holds its connection for ``seconds``
            async with self.api.call_api(
                "GET",
                version="",
                base=base,
                url=last,
                headers=self._headers,
                params=params,
                stream=True,
            ) as response:
                async for line in response.aiter_lines():
                    if line.strip():
                        event: dict[str, Any] = json.loads(line)
                        yield event
        except (kr8s.ServerError, httpx.HTTPStatusError) as exc:
            failed: httpx.Response | None = exc.response
            status = failed.status_code if failed is not None else 0
            raise kube_error(status, str(exc)) from None

    async def _merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._call(
            "PATCH", path, json=patch, headers={"Content-Type": "application/merge-patch+json"}
        )

    # -- pods ----------------------------------------------------------------------------------
    async def create_pod(self, namespace: str, pod: PodBody) -> PodBody:
        return cast(
            PodBody, await self._call("POST", f"/api/v1/namespaces/{namespace}/pods", json=pod)
        )

    async def get_pod(self, namespace: str, name: str) -> PodBody | None:
        try:
            return cast(
                PodBody, await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
            )
        except KubeNotFound:
            return None

    async def list_pods(self, namespace: str | None, label_selector: str) -> list[PodBody]:
        """Pods with ``label_selector`` in ``namespace`` (None: every namespace)."""
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        listed = await self._call("GET", path, params={"labelSelector": label_selector})
        items: list[PodBody] = listed.get("items") or []
        return items

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Ask for a graceful delete; a pod already gone is fine."""
        # Already gone.
        with contextlib.suppress(KubeNotFound):
            await self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def remove_finalizer(
        self, namespace: str, name: str, finalizer: str, seen: PodBody | None = None
    ) -> None:
        """Remove ``finalizer`` from the pod; a pod without it or gone is fine. With ``seen``
        (the pod as an event showed it) one JSON patch does it, its ``test`` op making sure the
        finalizer is still where it was seen; a pod that changed since is read again."""
        where = list(((seen or {}).get("metadata") or {}).get("finalizers") or [])
        if finalizer in where:
            at = f"/metadata/finalizers/{where.index(finalizer)}"
            ops = [{"op": "test", "path": at, "value": finalizer}, {"op": "remove", "path": at}]
            try:
                await self._call(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{name}",
                    json=ops,
                    headers={"Content-Type": "application/json-patch+json"},
                )
                return
            except KubeNotFound:
                return
            except (KubeConflict, KubeInvalid):  # 422: the test op failed (the list moved)
                pass
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

    async def add_finalizer(self, pod: PodBody, finalizer: str) -> None:
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
        except (*CHANGED_OR_GONE, KubeInvalid):
            pass

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

    # -- the operator's leader-election Lease (election.elector) ---------------------------------
    async def get_lease(self, namespace: str, name: str) -> LeaseBody | None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        try:
            return cast(LeaseBody, await self._call("GET", path))
        except KubeNotFound:
            return None

    async def create_lease(self, namespace: str, lease: LeaseBody) -> LeaseBody:
        """Create it; 409 (``KubeConflict``) when another candidate created it first."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return cast(LeaseBody, await self._call("POST", path, json=lease))

    async def replace_lease(self, namespace: str, lease: LeaseBody) -> LeaseBody:
        """Replace it (PUT) as it was read: ``lease.metadata.resourceVersion`` is a
        precondition, so a write by anyone since fails with 409 (``KubeConflict``)."""
        name = lease["metadata"]["name"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        return cast(LeaseBody, await self._call("PUT", path, json=lease))

    # -- teamruns ------------------------------------------------------------------------------
    async def patch_teamrun_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
    ) -> TeamRunBody:
        """Merge-patch the status; with ``resource_version`` it fails (409) if anyone wrote
        since, which makes a one-time transition (such as resuming) happen exactly once."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}/status"
        patch: dict[str, Any] = {"status": status}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        written = cast(TeamRunBody, await self._merge_patch(path, patch))
        if self.teamrun_written is not None:
            self.teamrun_written(written)
        return written

    # -- approval decisions --------------------------------------------------------------------
    async def create_decision(self, namespace: str, decision: DecisionBody) -> DecisionBody:
        """Create it and return it as stored; 409 when the name is taken."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions"
        return cast(DecisionBody, await self._call("POST", path, json=decision))

    async def delete_decision(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> bool:
        """Delete exactly the resource with ``uid`` as it was read at ``resource_version``:
        ``True`` when it is gone (or was already), ``False`` when it changed since (409; a
        decision made on it meanwhile must be judged again, not deleted unseen)."""
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        try:
            await self._call(
                "DELETE",
                f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}",
                json={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions},
            )
        except KubeNotFound:
            return True
        except KubeConflict:
            return False
        return True

    async def restore_decision_metadata(
        self, namespace: str, name: str, uid: str, published: ObjectMeta
    ) -> DecisionBody:
        """Put back the owner references and labels the operator published and drop every
        finalizer, on exactly the resource with ``uid`` (a merge patch naming the uid is refused
        for another one); returns the resource as patched."""
        patched = await self._call(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}",
            json={
                "metadata": {
                    "uid": uid,
                    "ownerReferences": published["ownerReferences"],
                    "labels": published["labels"],
                    "finalizers": None,
                }
            },
            headers={"Content-Type": "application/merge-patch+json"},
        )
        return cast(DecisionBody, patched)

    async def list_decisions(self, namespace: str, teamrun: str) -> list[DecisionBody]:
        listed = await self._call(
            "GET",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions",
            params={"labelSelector": f"oma.dev/teamrun={teamrun}"},
        )
        items: list[DecisionBody] = listed.get("items", [])
        return items

    async def get_decision(self, namespace: str, name: str) -> DecisionBody | None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}"
        try:
            return cast(DecisionBody, await self._call("GET", path))
        except KubeNotFound:
            return None

    async def patch_decision_spec(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> DecisionBody:
        """Merge-patch the spec only if nobody wrote since ``resource_version`` (else 409), so a
        decision is never laid over one made meanwhile by someone else."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/approvaldecisions/{name}"
        patch = {"metadata": {"resourceVersion": resource_version}, "spec": spec}
        return cast(DecisionBody, await self._merge_patch(path, patch))

    async def patch_decision_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, object],
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
        patch: dict[str, Any] = {"status": status}
        if preconditions:
            patch["metadata"] = preconditions
        await self._merge_patch(path, patch)

    # -- events --------------------------------------------------------------------------------
    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self._call("POST", f"/api/v1/namespaces/{namespace}/events", json=event)

    # -- secrets -------------------------------------------------------------------------------
    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = await self._call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        data = (secret.get("data") or {}).get(key)
        if data is None:
            raise kube_error(404, f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    async def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The keys the Secret holds, or None when there is no such Secret."""
        try:
            secret = await self._call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except KubeNotFound:
            return None
        return frozenset(secret.get("data") or {})

    async def annotate_teamrun(
        self, namespace: str, name: str, annotations: dict[str, str], resource_version: str
    ) -> TeamRunBody:
        """Merge-patch the TeamRun's annotations, only if nobody wrote since
        ``resource_version`` (409 otherwise)."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}"
        patch = {"metadata": {"annotations": annotations, "resourceVersion": resource_version}}
        return cast(TeamRunBody, await self._merge_patch(path, patch))

    async def patch_teamrun_spec(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> TeamRunBody:
        """Merge-patch fields of the TeamRun's spec, only if nobody wrote since
        ``resource_version`` (409 otherwise)."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}"
        patch = {"spec": spec, "metadata": {"resourceVersion": resource_version}}
        return cast(TeamRunBody, await self._merge_patch(path, patch))

    async def delete_teamrun(
        self, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> bool:
        """Delete exactly the TeamRun with ``uid`` (a newer one of that name is left alone), and
        with ``resource_version`` only as it was read: ``True`` when it is gone, ``False`` when
        it changed (409: the caller reads it again). Its runner pods go with it (owner
        references)."""
        preconditions = {"uid": uid}
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        try:
            await self._call(
                "DELETE",
                f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}",
                json={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": preconditions,
                    "propagationPolicy": "Background",
                },
            )
        except KubeNotFound:
            return True
        except KubeConflict:
            return False
        return True

    async def get_teamrun(self, namespace: str, name: str) -> TeamRunBody | None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/teamruns/{name}"
        try:
            return cast(TeamRunBody, await self._call("GET", path))
        except KubeNotFound:
            return None

    # -- identity ------------------------------------------------------------------------------
    async def may(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """Whether the API server lets us ``verb`` ``resource`` (in ``namespace``; None: in
        every namespace), asked with a SelfSubjectAccessReview: a refused attempt would make
        kr8s re-authenticate and open a new connection pool, which ends every watch in flight."""
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespace is not None:
            attributes["namespace"] = namespace
        review = await self._call(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            },
        )
        return bool((review.get("status") or {}).get("allowed"))

    async def self_subject_review(self) -> dict[str, Any]:
        """Who the API server takes us for (``status.userInfo``: username, groups)."""
        review = await self._call(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        user: dict[str, Any] = (review.get("status") or {}).get("userInfo") or {}
        return user
