"""Signed-in browsers: a random id in an HttpOnly, SameSite=Strict cookie names a session held
in memory (its API client, who the API server says it is, its CSRF token). Nothing about the
user is in the cookie. A session idle for ``idle_seconds`` is dropped by the sweep (or when it
is next presented) and its client closed; a dropped session's live streams end with it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from oma_operator.console.access import Identity
from oma_operator.k8s.client import Kube

COOKIE = "oma_console"
MAX_SESSIONS = 1000  # each holds a client: past this, new sign-ins wait for idle ones to go
MAX_PER_USER = 8  # a user's oldest session goes when they sign in a ninth time
SWEEP_SECONDS = 60.0


class SessionsFull(Exception):
    """No room for another session: try again once idle ones are dropped."""


@dataclass(eq=False)
class Session:
    id: str
    kube: Kube
    who: Identity
    namespaces: tuple[str, ...]  # looked in when the user may not list across namespaces
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    last_used: float = field(default_factory=time.monotonic)
    streams: int = 0  # live inbox streams open (bounded per session)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # set when dropped


class Sessions:
    def __init__(self, idle_seconds: float, close: Callable[[Kube], Awaitable[None]]) -> None:
        self._idle = idle_seconds
        self._close = close
        self._by_id: dict[str, Session] = {}

    async def add(self, kube: Kube, who: Identity, namespaces: tuple[str, ...]) -> Session:
        await self.sweep()
        theirs = [s for s in self._by_id.values() if s.who.username == who.username]
        for old in sorted(theirs, key=lambda s: s.last_used)[
            : max(0, len(theirs) + 1 - MAX_PER_USER)
        ]:
            await self.drop(old.id)
        if len(self._by_id) >= MAX_SESSIONS:
            raise SessionsFull("the console holds as many sessions as it may: try again later")
        session = Session(secrets.token_urlsafe(32), kube, who, namespaces)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._by_id.get(session_id or "")
        if session is None or self._expired(session, time.monotonic()):
            return None
        session.last_used = time.monotonic()
        return session

    def live(self, session: Session) -> bool:
        """Whether ``session`` is still signed in (not dropped, not idle too long)."""
        return self._by_id.get(session.id) is session and not self._expired(
            session, time.monotonic()
        )

    async def drop(self, session_id: str) -> None:
        session = self._by_id.pop(session_id, None)
        if session is None:
            return
        session.ended.set()
        if not any(s.kube is session.kube for s in self._by_id.values()):
            await self._close(session.kube)

    async def sweep(self) -> None:
        """Drop every session idle for too long (their clients, and tokens, go with them)."""
        now = time.monotonic()
        for session in list(self._by_id.values()):
            if self._expired(session, now):
                await self.drop(session.id)

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            await self.sweep()

    async def aclose(self) -> None:
        for session_id in list(self._by_id):
            await self.drop(session_id)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.last_used > self._idle


class LaunchCode:
    """``oma console``'s one-time code: the URL it opens carries it once; the first browser
    to present it gets the session, and the code is spent."""

    def __init__(self) -> None:
        self.code: str | None = secrets.token_urlsafe(32)

    def matches(self, offered: str) -> bool:
        return self.code is not None and secrets.compare_digest(
            offered.encode(), self.code.encode()
        )

    def spend(self) -> None:
        self.code = None
