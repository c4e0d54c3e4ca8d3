"""Signed-in browsers: a random id in an HttpOnly, SameSite=Strict cookie names a session held
in memory (its API client, who the API server says it is, its CSRF token). Nothing about the
user is in the cookie; a session idle for ``idle_seconds`` is forgotten and its client closed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from oma_operator.console.access import Identity
from oma_operator.k8s.client import Kube

COOKIE = "oma_console"
MAX_SESSIONS = 1000  # each holds a client: a flood of sign-ins must not exhaust the console


@dataclass
class Session:
    id: str
    kube: Kube
    who: Identity
    namespaces: tuple[str, ...]  # looked in when the user may not list across namespaces
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    last_used: float = field(default_factory=time.monotonic)
    streams: int = 0  # live inbox streams open (bounded per session)


class Sessions:
    def __init__(self, idle_seconds: float, close: Callable[[Kube], Awaitable[None]]) -> None:
        self._idle = idle_seconds
        self._close = close
        self._by_id: dict[str, Session] = {}

    async def add(self, kube: Kube, who: Identity, namespaces: tuple[str, ...]) -> Session:
        await self._forget_idle()
        if len(self._by_id) >= MAX_SESSIONS:
            oldest = min(self._by_id.values(), key=lambda s: s.last_used)
            await self.drop(oldest.id)
        session = Session(secrets.token_urlsafe(32), kube, who, namespaces)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._by_id.get(session_id or "")
        if session is None or time.monotonic() - session.last_used > self._idle:
            return None
        session.last_used = time.monotonic()
        return session

    async def drop(self, session_id: str) -> None:
        session = self._by_id.pop(session_id, None)
        if session is not None and not any(s.kube is session.kube for s in self._by_id.values()):
            await self._close(session.kube)

    async def aclose(self) -> None:
        for session_id in list(self._by_id):
            await self.drop(session_id)

    async def _forget_idle(self) -> None:
        now = time.monotonic()
        for session in list(self._by_id.values()):
            if now - session.last_used > self._idle:
                await self.drop(session.id)


class LaunchCode:
    """``oma console``'s one-time code: the URL it opens carries it once; the first browser
    to present it gets the session, and the code is spent (another local user who finds the
    port finds nothing to use)."""

    def __init__(self) -> None:
        self.code: str | None = secrets.token_urlsafe(32)

    def spend(self, offered: str) -> bool:
        if self.code is None or not secrets.compare_digest(offered, self.code):
            return False
        self.code = None
        return True
