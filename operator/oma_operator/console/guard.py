"""What every response carries and every action must prove.

Content is attacker-controlled (a model wrote the tool input; anyone who may create a TeamRun
wrote its tasks): pages run no inline script and load nothing from elsewhere (a strict
Content-Security-Policy), are never framed, cached or given a referrer; every form that acts
carries the session's CSRF token, checked in constant time.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP response (streams included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


MAX_BODY = 256 * 1024  # no page posts more than a few short fields


class BodyLimit:
    """ASGI middleware: a request body must say its length, and not be over ``MAX_BODY``
    (Starlette reads a URL-encoded form whole, whatever its size)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            headers = dict(scope.get("headers") or [])
            length = headers.get(b"content-length", b"")
            if not length.isdigit() or int(length) > MAX_BODY:
                status = 413 if length.isdigit() else 411
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


def csrf_ok(expected: str, offered: object) -> bool:
    return isinstance(offered, str) and secrets.compare_digest(expected.encode(), offered.encode())


def cross_site(request: Request) -> bool:
    """Whether the browser says the request comes from another site (``Sec-Fetch-Site``; a
    browser that does not send it is judged by the CSRF token alone)."""
    return request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none")


# A Kubernetes object's name or namespace (DNS-1123 subdomain): what a page's path may name. Any
# other path segment would reach another API path, so it is refused before any call.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def named(params: Mapping[str, str]) -> tuple[str, str] | None:
    """The page's (namespace, name), or None when either is not an object name."""
    namespace, name = params.get("namespace", ""), params.get("name", "")
    if all(NAME.match(text) and ".." not in text for text in (namespace, name)):
        return namespace, name
    return None
