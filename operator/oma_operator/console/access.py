"""Whose credentials each page's API calls use: never the console's own.

``LocalAccess``: ``oma console`` on a reviewer's machine acts with their kubeconfig (its
context, exec plugins, ``--as``), as ``oma approve`` does; one client for everyone who holds the
launch code, which is the one person who started it. ``TokenAccess``: in the cluster each user
signs in with a bearer token (a service account's, or an OIDC id token the API server accepts);
every call is made with it, so RBAC and the admission policies decide what each user sees and
may do. The console keeps tokens in memory only, never in a page, a URL or a log.
"""

from __future__ import annotations

from dataclasses import dataclass

from oma_operator.cli.decisions import DecisionRefused, Target, api_errors, connect
from oma_operator.k8s.client import SA_DIR, Kube

IN_CLUSTER_CA = SA_DIR / "ca.crt"


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]


async def whoami(kube: Kube) -> Identity:
    """Who the API server takes ``kube``'s credentials for (``DecisionRefused`` if it will not
    say: the credentials are not accepted)."""
    async with api_errors(kube):
        user = await kube.self_subject_review()
    name = user.get("username")
    if not name:
        raise DecisionRefused("the API server did not say who you are (no username)")
    return Identity(str(name), tuple(str(g) for g in user.get("groups") or []))


class LocalAccess:
    signs_in = False

    def __init__(self, target: Target) -> None:
        self._target = target
        self._kube: Kube | None = None

    async def open(self) -> tuple[Kube, Identity]:
        if self._kube is None:
            self._kube = await connect(self._target)
        return self._kube, await whoami(self._kube)

    async def close(self, kube: Kube) -> None:
        """The one client lives as long as the console (``aclose``)."""

    async def aclose(self) -> None:
        if self._kube is not None:
            await self._kube.aclose()


class TokenAccess:
    signs_in = True

    def __init__(self, server: str, ca_file: str | None) -> None:
        self._server = server
        self._ca_file = ca_file

    async def sign_in(self, token: str) -> tuple[Kube, Identity]:
        kube = await Kube.with_token(self._server, token, self._ca_file)
        try:
            return kube, await whoami(kube)
        except BaseException:
            await kube.aclose()
            raise

    async def close(self, kube: Kube) -> None:
        await kube.aclose()

    async def aclose(self) -> None:
        """Each session's client is closed with it."""
