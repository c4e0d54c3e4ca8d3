"""Getting a session: the launch link ``oma console`` opened (local), or a bearer token signed
in with (in the cluster); signing out."""

from __future__ import annotations

import re

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from oma_operator.cli.decisions import DecisionRefused
from oma_operator.console.access import LocalAccess, TokenAccess
from oma_operator.console.guard import NAME, cross_site, csrf_ok, named
from oma_operator.console.sessions import COOKIE, Session, SessionsFull
from oma_operator.console.state import ConsoleState, state_of

# A bearer token is printable ASCII without spaces (RFC 6750's b64token and JWTs are narrower);
# an OIDC id token with many groups is a few kB: anything else is refused before any use.
TOKEN = re.compile(r"^[\x21-\x7e]{1,16384}$")
MAX_NAMESPACES = 20  # each is watched while an inbox is open


def signed_in(request: Request) -> Session | Response:
    """The request's session, or where to get one."""
    console = state_of(request)
    session = console.session(request)
    if session is not None:
        return session
    if console.access.signs_in:
        return RedirectResponse("/signin", status_code=303)
    return console.page("launch.html", status_code=401)


def opened(request: Request) -> tuple[Session, str, str] | Response:
    """The session and the page's (namespace, name), or the response that refuses the page."""
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    target = named(request.path_params)
    if target is None:
        return Response("no such page", status_code=404)
    return session, *target


async def small_form(request: Request) -> FormData:
    """The posted form, bounded: no page posts more than a few short fields."""
    return await request.form(max_files=0, max_fields=16, max_part_size=64 * 1024)


async def acting_form(request: Request, session: Session) -> tuple[FormData, str | None]:
    """The posted form of an action, and why it is refused when it does not carry the
    session's CSRF token."""
    form = await small_form(request)
    if csrf_ok(session.csrf, form.get("csrf")):
        return form, None
    return form, "refused: the form is not this session's (reload the page and try again)"


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
    """``GET /launch?code=...``: the one-time link ``oma console`` printed and opened. The code
    is spent once a session is made (a failure to reach the cluster leaves it usable)."""
    console = state_of(request)
    access = console.access
    if not isinstance(access, LocalAccess) or not console.launch.matches(
        request.query_params.get("code", "")
    ):
        return console.page("launch.html", status_code=401, spent=True)
    try:
        kube, who = await access.open()
        namespaces = console.settings.namespaces or (kube.namespace,)
        session = await console.sessions.add(kube, who, namespaces)
    except (DecisionRefused, SessionsFull) as exc:
        return console.page("launch.html", status_code=503, error=str(exc))
    console.launch.spend()
    return _with_cookie(console, session)


async def signin_form(request: Request) -> Response:
    console = state_of(request)
    if not console.access.signs_in:
        return console.page("launch.html", status_code=404)
    return console.page("signin.html", namespaces=" ".join(console.settings.namespaces))


async def signin(request: Request) -> Response:
    """``POST /signin``: the token is tried once (a SelfSubjectReview says whose it is) and
    kept only in the session's memory. Posted from this console's own page only: a form on
    another site must not sign a browser in as someone else."""
    console = state_of(request)
    access = console.access
    if not isinstance(access, TokenAccess):
        return console.page("launch.html", status_code=404)
    if cross_site(request):
        return console.page("signin.html", status_code=403, error="sign in from this page")
    form = await small_form(request)
    token = str(form.get("token") or "").strip()
    listed = str(form.get("namespaces") or "").split()
    if not TOKEN.match(token):
        return console.page("signin.html", status_code=400, error="paste one bearer token")
    if len(listed) > MAX_NAMESPACES or not all(NAME.match(ns) for ns in listed):
        error = f"at most {MAX_NAMESPACES} namespace names, separated by spaces"
        return console.page("signin.html", status_code=400, error=error)
    namespaces = tuple(listed) or console.settings.namespaces
    try:
        kube, who = await access.sign_in(token)
    except DecisionRefused as exc:
        # The API server's words only: a transport error could quote the request it failed on.
        said = str(exc) if "answered" in str(exc) else "not accepted"
        return console.page("signin.html", status_code=401, error=f"not signed in: {said}")
    try:
        session = await console.sessions.add(kube, who, namespaces)
    except SessionsFull as exc:
        await access.close(kube)
        return console.page("signin.html", status_code=503, error=str(exc))
    return _with_cookie(console, session)


async def signout(request: Request) -> Response:
    console = state_of(request)
    session = console.session(request)
    form = await small_form(request)
    if session is not None and csrf_ok(session.csrf, form.get("csrf")):
        await console.sessions.drop(session.id)
    response = RedirectResponse("/signin" if console.access.signs_in else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
