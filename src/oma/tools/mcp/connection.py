"""One MCP server's connection for one attempt: opened at the start, closed at the end.

The SDK's client lives in a task of its own: its transport runs in anyio task groups that must
be entered and left by the same task, and a failure inside them (the server went away) cancels
that task, never the run's. Calls come from the run's tasks; a connection that is lost while a
call waits ends that call with ``McpUnavailableError`` (transient: the call's outcome is unknown,
so the attempt ends and the restart decides, by the tool's recovery, what happens to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any, cast
from urllib.parse import urlsplit

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, RequestParamsMeta, TextContent, Tool

from oma.tools.mcp.errors import McpToolError, McpUnavailableError
from oma.tools.mcp.recovery import IDEMPOTENCY_KEY_META
from oma.tools.mcp.spec import McpServerSpec

# How many pages of tools/list a server may answer with (a server paging forever is refused).
MAX_TOOL_PAGES = 100
# The JSON-RPC errors that say the call may have reached the server and its answer was lost:
# the SDK's "Connection closed" (code -32000, which is also the first code of the range servers
# use for their own errors, so only with the SDK's message) and any request timeout (-32001).
_CONNECTION_CLOSED = (-32000, "Connection closed")
_REQUEST_TIMEOUT = -32001
# What the SDK answers in the server's stead when the HTTP reply was an error status without a
# JSON-RPC error in it (a gateway's 502/504, a restarted server's 404 for the old session): the
# request may have run, so these are not the server's refusal either.
_SDK_STAND_INS = ("Server returned an error response", "Session terminated")


class McpConnection:
    """``open()`` connects and lists the tools; ``call()`` calls one; ``close()`` ends it."""

    def __init__(self, spec: McpServerSpec, environ: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self._environ = os.environ if environ is None else environ
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._lost = asyncio.Event()
        self._failure: BaseException | None = None
        self._owner: asyncio.Task[None] | None = None
        self._refused: int | None = None  # an HTTP 401/403 seen: the credentials are wrong
        self._opened = False

    @property
    def where(self) -> str:
        """The server as messages name it: a URL without credentials, or the program."""
        if self.spec.url is not None:
            parts = urlsplit(self.spec.url)
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{host}{port}{parts.path}"
        assert self.spec.command is not None
        return f"command {self.spec.command[0]!r}"

    async def open(self) -> list[Tool]:
        """Connect and list the server's tools (every page). Unreachable, or not answering in
        ``timeoutSeconds``: ``McpUnavailableError``, transient unless the server refused the
        credentials or the program does not exist."""
        self._owner = asyncio.create_task(self._own(), name=f"mcp:{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.timeout_seconds):
                await self._ready.wait()
        except TimeoutError:
            await self.close()
            raise self._unavailable("did not answer in time", None) from None
        if self._client is None:
            failure = self._failure
            await self.close()
            raise self._unavailable("could not be reached", failure) from failure
        try:
            async with asyncio.timeout(self.spec.timeout_seconds):
                tools = await self._list_tools(self._client)
        except McpToolError:
            await self.close()
            raise
        except Exception as exc:  # timed out, refused, or an answer the SDK could not read
            await self.close()
            raise self._unavailable("did not list its tools", exc) from exc
        self._opened = True  # from here on a 401/403 answers one call, not the connection
        return tools

    async def call(self, name: str, arguments: dict[str, Any], key: str) -> CallToolResult:
        """Call ``name`` with the idempotency ``key`` in the request's ``_meta``. An error the
        server answers with is returned as an error result; a lost answer raises."""
        client = self._client
        if client is None or self._lost.is_set():
            raise self._unavailable("is no longer connected", self._failure)
        request = asyncio.ensure_future(
            client.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.spec.timeout_seconds,
                meta=cast(RequestParamsMeta, {IDEMPOTENCY_KEY_META: key}),
            )
        )
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({request, lost}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this call was cancelled (the attempt is ending): so is its request
            request.cancel()
            raise
        finally:
            lost.cancel()
        if not request.done():  # the connection went first
            request.cancel()
            with contextlib.suppress(BaseException):
                await request
            raise self._unavailable(f"went away during a call of {name!r}", self._failure)
        try:
            return request.result()
        except MCPError as exc:
            closed = (exc.code, exc.message) == _CONNECTION_CLOSED
            if closed or exc.code == _REQUEST_TIMEOUT or exc.message in _SDK_STAND_INS:
                raise self._unavailable(f"did not answer a call of {name!r}", exc) from exc
            refused = TextContent(type="text", text=f"MCP error {exc.code}: {exc.message}")
            return CallToolResult(content=[refused], is_error=True)
        except (OSError, httpx2.HTTPError) as exc:
            raise self._unavailable(f"failed during a call of {name!r}", exc) from exc

    async def close(self) -> None:
        self._closing.set()
        owner, self._owner = self._owner, None
        if owner is not None and not self._ready.is_set():
            owner.cancel()  # still connecting: do not wait out the SDK's own handshake timeouts
        if owner is not None:
            with contextlib.suppress(BaseException):
                await owner
        self._client = None

    async def _own(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._new_client(stack))
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as exc:  # the transport's failure, in whatever group it came
            self._failure = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._lost.set()
            self._ready.set()

    def _new_client(self, stack: AsyncExitStack) -> Client:
        spec = self.spec
        if spec.command is not None:
            program, *args = spec.command
            return Client(
                StdioServerParameters(command=program, args=args, env=dict(spec.env) or None),
                read_timeout_seconds=spec.timeout_seconds,
                cache=None,
            )
        assert spec.url is not None
        http = httpx2.AsyncClient(
            headers=self._headers(),
            timeout=spec.timeout_seconds,
            event_hooks={"response": [self._see_response]},
        )
        stack.push_async_callback(http.aclose)
        return Client(
            streamable_http_client(spec.url, http_client=http),
            read_timeout_seconds=spec.timeout_seconds,
            cache=None,
        )

    async def _see_response(self, response: httpx2.Response) -> None:
        # The SDK turns a refusal into a generic JSON-RPC error; the status says why.
        if response.status_code in (401, 403) and not self._opened:
            self._refused = response.status_code

    def _headers(self) -> dict[str, str]:
        headers = {}
        for header, variable in self.spec.headers_from_env.items():
            value = self._environ.get(variable)
            if value is None:
                raise McpToolError(
                    f"MCP server {self.spec.name!r}: header {header} comes from the environment "
                    f"variable {variable}, which is not set; set it (a TeamRun: runner.env with "
                    "valueFrom.secretKeyRef)"
                )
            headers[header] = value
        return headers

    async def _list_tools(self, client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpToolError(
            f"MCP server {self.spec.name!r} at {self.where} listed more than {MAX_TOOL_PAGES} "
            "pages of tools"
        )

    def _unavailable(self, what: str, cause: BaseException | None) -> McpUnavailableError:
        detail = f": {_describe(cause)}" if cause is not None else ""
        if self._refused is not None:
            detail += f" (HTTP {self._refused}: the server refused the credentials)"
        permanent = self._refused is not None or (cause is not None and _is_permanent(cause))
        hint = (
            "fix the server's credentials or the spec; retrying will not help"
            if permanent
            else "the attempt ends and the run retries it from its checkpoint"
        )
        return McpUnavailableError(
            f"MCP server {self.spec.name!r} at {self.where} {what}{detail}; {hint}",
            transient=not permanent,
        )


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _describe(error: BaseException) -> str:
    leaves = [leaf for leaf in _leaves(error) if not isinstance(leaf, asyncio.CancelledError)]
    text = "; ".join(f"{type(leaf).__name__}: {leaf}".rstrip(": ") for leaf in leaves[:3])
    return " ".join(text.split())[:500] or type(error).__name__


def _is_permanent(error: BaseException) -> bool:
    """Refused credentials, or a program that is not there: the same again next time."""
    for leaf in _leaves(error):
        if isinstance(leaf, httpx2.HTTPStatusError) and leaf.response.status_code in (401, 403):
            return True
        if isinstance(leaf, FileNotFoundError | PermissionError | McpToolError):
            return True
    return False
