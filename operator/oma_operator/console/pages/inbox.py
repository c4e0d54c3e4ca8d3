"""The inbox: the requests waiting for a reviewer, across the namespaces the user may list,
newest first, kept current by a server-sent event stream fed by a watch."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from oma_operator.cli.decisions import DecisionRefused, api_errors
from oma_operator.console import reads
from oma_operator.console.pages.signin import signed_in
from oma_operator.console.rules.inbox_rows import InboxRow, inbox_rows
from oma_operator.console.sessions import Session
from oma_operator.console.state import state_of

MAX_STREAMS = 4  # per session: a page left open in many tabs must not hold many watches


async def _rows(session: Session, lists: reads.InboxLists) -> tuple[list[InboxRow], str]:
    try:
        async with api_errors(session.kube):
            found = await reads.decisions_at(session.kube, lists.decisions)
            runs = await reads.teamruns_at(session.kube, lists.teamruns) if found else []
    except DecisionRefused as exc:
        return [], str(exc)
    by_name = {(r["metadata"].get("namespace", ""), r["metadata"]["name"]): r for r in runs}
    return inbox_rows(found, datetime.now(UTC), by_name), ""


async def _lists(session: Session) -> reads.InboxLists | str:
    try:
        async with api_errors(session.kube):
            return await reads.inbox_lists(session.kube, session.namespaces)
    except DecisionRefused as exc:
        return str(exc)


async def inbox(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    lists = await _lists(session)
    rows, error = ([], lists) if isinstance(lists, str) else await _rows(session, lists)
    return state_of(request).page("inbox.html", session=session, rows=rows, error=error)


async def stream(request: Request) -> Response:
    """``text/event-stream``: an ``inbox`` event with the rows' HTML after every change, until
    the page goes or the session ends (signed out, idle too long)."""
    console = state_of(request)
    session = signed_in(request)
    if isinstance(session, Response):
        return Response(status_code=401)
    if session.streams >= MAX_STREAMS:
        return Response("too many open inbox pages", status_code=429)
    session.streams += 1  # counted before any wait: concurrent requests see it
    lists = await _lists(session)
    if isinstance(lists, str):
        session.streams -= 1
        return Response(lists, status_code=502, media_type="text/plain")

    async def events() -> AsyncIterator[dict[str, str]]:
        changed: asyncio.Queue[None] = asyncio.Queue()
        watchers = [
            asyncio.create_task(reads.watch_changes(session.kube, path, changed))
            for path in lists.decisions
        ]
        ended = asyncio.create_task(session.ended.wait())
        try:
            while console.sessions.live(session):
                next_change = asyncio.create_task(changed.get())
                await asyncio.wait({next_change, ended}, return_when=asyncio.FIRST_COMPLETED)
                if not next_change.done():
                    next_change.cancel()
                    break
                while not changed.empty():  # a burst of changes: one render
                    changed.get_nowait()
                if not console.sessions.live(session):
                    break
                rows, error = await _rows(session, lists)
                html = console.fragment("inbox_rows.html", rows=rows, error=error)
                yield {"event": "inbox", "data": html}
        finally:
            session.streams -= 1
            for task in (*watchers, ended):
                task.cancel()
            for task in (*watchers, ended):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return EventSourceResponse(events(), ping=15)
