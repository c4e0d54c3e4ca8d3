"""Getting a session: the launch link ``oma console`` opened (local), or a bearer token signed
in with (in the cluster); signing out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from oma_operator.cli.decisions import DecisionRefused
from oma_operator.console.access import LocalAccess, TokenAccess
from oma_operator.console.guard import csrf_ok
from oma_operator.console.sessions import COOKIE, Session
from oma_operator.console.state import ConsoleState, state_of

MAX_TOKEN = 16384  # an OIDC id token with many groups is a few kB; anything longer is refused


def signed_in(request: Request) -> Session | Response:
    """The request's session, or where to get one."""
    console = state_of(request)
    session = console.session(request)
    if session is not None:
        return session
    if console.access.signs_in:
        return RedirectResponse("/signin", status_code=303)
    return console.page("launch.html", status_code=401)


def _with_cookie(console: ConsoleState, session: Session, to: str = "/inbox") -> Response:
    response = RedirectResponse(to, status_code=303)
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="strict",
        secure=console.settings.secure_cookies,
        path="/",
    )
    return response


async def launch(request: Request) -> Response:
    """``GET /launch?code=...``: the one-time link ``oma console`` printed and opened."""
    console = state_of(request)
    access = console.access
    if not isinstance(access, LocalAccess) or not console.launch.spend(
        request.query_params.get("code", "")
    ):
        return console.page("launch.html", status_code=401, spent=True)
    try:
        kube, who = await access.open()
    except DecisionRefused as exc:
        return console.page("launch.html", status_code=401, error=str(exc))
    namespaces = console.settings.namespaces or (kube.namespace,)
    session = await console.sessions.add(kube, who, namespaces)
    return _with_cookie(console, session)


async def signin_form(request: Request) -> Response:
    console = state_of(request)
    if not console.access.signs_in:
        return console.page("launch.html", status_code=404)
    return console.page("signin.html", namespaces=" ".join(console.settings.namespaces))


async def signin(request: Request) -> Response:
    """``POST /signin``: the token is tried once (a SelfSubjectReview says whose it is) and
    kept only in the session's memory."""
    console = state_of(request)
    access = console.access
    if not isinstance(access, TokenAccess):
        return console.page("launch.html", status_code=404)
    form = await request.form()
    token = str(form.get("token") or "").strip()
    listed = str(form.get("namespaces") or "").split()
    namespaces = tuple(listed) or console.settings.namespaces
    if not token or len(token) > MAX_TOKEN or any(c.isspace() for c in token):
        return console.page(
            "signin.html", status_code=400, error="paste one bearer token", namespaces=""
        )
    try:
        kube, who = await access.sign_in(token)
    except DecisionRefused as exc:
        return console.page(
            "signin.html", status_code=401, error=f"not signed in: {exc}", namespaces=""
        )
    session = await console.sessions.add(kube, who, namespaces)
    return _with_cookie(console, session)


async def signout(request: Request) -> Response:
    console = state_of(request)
    session = console.session(request)
    form = await request.form()
    if session is not None and csrf_ok(session.csrf, form.get("csrf")):
        await console.sessions.drop(session.id)
    response = RedirectResponse("/signin" if console.access.signs_in else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
