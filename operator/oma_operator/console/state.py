"""The console's one state object: how users get API access, their sessions, the templates
and the settings (``app.build`` makes it; every page reads it from ``request.app.state``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from oma.visible import visible
from oma_operator.console.access import LocalAccess, TokenAccess
from oma_operator.console.sessions import COOKIE, LaunchCode, Session, Sessions

HERE = Path(__file__).parent


@dataclass(frozen=True)
class ConsoleSettings:
    namespaces: tuple[str, ...] = ()  # tried one by one when a user may not list them all
    idle_seconds: float = 3600.0
    secure_cookies: bool = False  # set behind TLS (the chart's ingress): cookies over https only
    record_wait_seconds: float = 30.0  # how long a decision waits for the operator to record it
    hosts: tuple[str, ...] = ()  # the Host names a request may carry (empty: any)


def shown(value: Any) -> str:
    """Any text as a person may safely read it: control, bidi and invisible characters as
    visible escapes (HTML escaping is Jinja's autoescape, on for every template)."""
    return visible("" if value is None else str(value))


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shown"] = shown
    return env


class ConsoleState:
    def __init__(self, access: LocalAccess | TokenAccess, settings: ConsoleSettings) -> None:
        self.access = access
        self.settings = settings
        self.sessions = Sessions(settings.idle_seconds, access.close)
        self.launch = LaunchCode()
        self.env = templates()

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE))

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(signs_in=self.access.signs_in, **context)
        return HTMLResponse(html, status_code=status_code)

    def fragment(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context)

    async def aclose(self) -> None:
        await self.sessions.aclose()
        await self.access.aclose()


def state_of(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state
