"""The runs: every TeamRun the user may list (phase, attempt, tasks, spend, checkpoint age),
and one run's page: its attempts timeline, conditions, Events, and suspend / resume / cancel /
retry, each made as the signed-in user (``oma suspend|resume|cancel|retry``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from oma_operator.cli.decisions import DecisionRefused, api_errors
from oma_operator.cli.holds import Request as HoldRequest
from oma_operator.cli.holds import hold_with
from oma_operator.cli.runs import retry_with
from oma_operator.console import reads
from oma_operator.console.pages.signin import acting_form, opened, signed_in
from oma_operator.console.rules.run_rows import actions, run_row, run_rows, timeline
from oma_operator.console.sessions import Session
from oma_operator.console.state import state_of

RETRY_WAIT_SECONDS = 30.0


async def runs(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    console = state_of(request)
    error = ""
    found = []
    try:
        async with api_errors(session.kube):
            found = await reads.teamruns(session.kube, session.namespaces)
    except DecisionRefused as exc:
        error = str(exc)
    rows = run_rows(found, datetime.now(UTC))
    return console.page("runs.html", session=session, rows=rows, error=error)


async def _render(
    request: Request, session: Session, namespace: str, name: str, status: int = 200, **said: Any
) -> Response:
    console = state_of(request)
    try:
        async with api_errors(session.kube):
            teamrun = await session.kube.get_teamrun(namespace, name)
            events = await reads.events_of(session.kube, namespace, name, "TeamRun")
    except DecisionRefused as exc:
        return console.page(
            "message.html", status_code=403, session=session, title="Refused", text=str(exc)
        )
    if teamrun is None:
        return console.page(
            "message.html",
            status_code=404,
            session=session,
            title="No such run",
            text=f"teamrun {name} not found in namespace {namespace}",
        )
    return console.page(
        "run.html",
        status_code=status,
        session=session,
        run=run_row(teamrun, datetime.now(UTC)),
        attempts=timeline(teamrun),
        conditions=(teamrun.get("status") or {}).get("conditions") or [],
        events=events,
        can=actions(teamrun),
        **said,
    )


async def show(request: Request) -> Response:
    page = opened(request)
    if isinstance(page, Response):
        return page
    return await _render(request, *page)


async def act(request: Request) -> Response:
    page = opened(request)
    if isinstance(page, Response):
        return page
    session, namespace, name = page
    form, refused = await acting_form(request, session)
    if refused is not None:
        return await _render(request, session, namespace, name, 403, error=refused)
    action = str(form.get("action") or "")
    try:
        async with api_errors(session.kube):
            if action in ("suspend", "resume", "cancel"):
                await hold_with(session.kube, namespace, name, cast(HoldRequest, action))
                said = f"{action} requested"
            elif action == "retry":
                await retry_with(session.kube, namespace, name, RETRY_WAIT_SECONDS)
                said = "retry queued by the operator"
            else:
                return await _render(request, session, namespace, name, 400, error="no such action")
    except DecisionRefused as exc:
        return await _render(request, session, namespace, name, 409, error=f"refused: {exc}")
    return await _render(request, session, namespace, name, done=said)
