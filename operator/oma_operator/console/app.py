"""The console as a Starlette application: the same code serves ``oma console`` on a reviewer's
machine (``LocalAccess``) and the chart's in-cluster Deployment (``TokenAccess``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from oma_operator.console.access import LocalAccess, TokenAccess
from oma_operator.console.guard import BodyLimit, SecurityHeaders
from oma_operator.console.pages import decision, inbox, runs, signin
from oma_operator.console.state import HERE, ConsoleSettings, ConsoleState


async def home(request: Request) -> Response:
    return RedirectResponse("/inbox", status_code=303)


async def healthz(request: Request) -> Response:
    return Response("ok", media_type="text/plain")


def build(access: LocalAccess | TokenAccess, settings: ConsoleSettings) -> Starlette:
    console = ConsoleState(access, settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sweep = asyncio.create_task(console.sessions.sweep_forever())
        try:
            yield
        finally:
            sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweep
            await console.aclose()

    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/launch", signin.launch),
        Route("/signin", signin.signin_form, methods=["GET"]),
        Route("/signin", signin.signin, methods=["POST"]),
        Route("/signout", signin.signout, methods=["POST"]),
        Route("/inbox", inbox.inbox),
        Route("/inbox/stream", inbox.stream),
        Route("/decisions/{namespace}/{name}", decision.show, methods=["GET"]),
        Route("/decisions/{namespace}/{name}", decision.decide, methods=["POST"]),
        Route("/runs", runs.runs),
        Route("/runs/{namespace}/{name}", runs.show, methods=["GET"]),
        Route("/runs/{namespace}/{name}", runs.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders), Middleware(BodyLimit)]
    if settings.hosts:  # on loopback: a page of another name (DNS rebinding) gets nothing
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(settings.hosts)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.console = console
    return app
