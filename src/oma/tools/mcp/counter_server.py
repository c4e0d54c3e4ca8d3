"""A counting MCP server built with the ``mcp`` SDK, the reference for a server that honours
oma's idempotency key: its side effects land in Redis, so the tests (and a demo) see exactly
what ran and under which key. Shipped in the runner image (``oma[mcp,redis]``), so a TeamRun
can start it over stdio.

``python -m oma.tools.mcp.counter_server --port 8765`` (streamable HTTP on 127.0.0.1, path
``/mcp``) or ``--stdio``. Environment:

- ``MCP_COUNTER_REDIS_URL`` (required), ``MCP_COUNTER_PREFIX`` (key prefix, default ``mcp``);
- ``MCP_COUNTER_RENAME=add=add_v2``: offer ``add`` under another name (a server that changed);
- ``MCP_COUNTER_TOKEN``: refuse (401) HTTP requests whose ``Authorization`` is not
  ``Bearer <token>``.

Tools: ``add`` (idempotent by key: an amount added once per key), ``pay`` (destructive: every
call pays again; for both, ``acknowledge_seconds`` delays the answer, not the effect), ``lookup``
(read-only), ``refuse`` (always a tool error), ``deny`` (always a JSON-RPC error of the server's
own, code -32000) and ``whoami`` (the ``X-Team`` header it was sent). Every call is appended to
``<prefix>:calls`` as JSON with its tool, key and arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

import redis.asyncio as redis
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from oma.tools.mcp.recovery import IDEMPOTENCY_KEY_META


def build_server() -> MCPServer:
    url = os.environ["MCP_COUNTER_REDIS_URL"]
    prefix = os.environ.get("MCP_COUNTER_PREFIX", "mcp")
    renamed = dict(
        pair.split("=", 1) for pair in os.environ.get("MCP_COUNTER_RENAME", "").split(",") if pair
    )
    db = redis.Redis.from_url(url)
    server = MCPServer("oma-counter")

    async def seen(tool: str, ctx: Context, arguments: dict[str, Any]) -> str:
        meta = ctx.request_context.meta or {}
        key = str(meta.get(IDEMPOTENCY_KEY_META, ""))
        call = {"tool": tool, "key": key, "arguments": arguments}
        await db.rpush(f"{prefix}:calls", json.dumps(call, sort_keys=True))
        return key

    @server.tool(
        name=renamed.get("add", "add"),
        description="Add an amount to a named counter (once per idempotency key).",
        annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    )
    async def add(counter: str, amount: int, ctx: Context, acknowledge_seconds: float = 0) -> str:
        key = await seen("add", ctx, {"counter": counter, "amount": amount})
        if not key:
            raise ToolError("no idempotency key in the request's _meta")
        if await db.set(f"{prefix}:done:{key}", "1", nx=True):
            await db.incrby(f"{prefix}:counter:{counter}", amount)
        total = int(await db.get(f"{prefix}:counter:{counter}") or 0)
        await asyncio.sleep(min(max(acknowledge_seconds, 0.0), 30.0))
        return f"{counter} = {total}"

    @server.tool(
        name=renamed.get("pay", "pay"),
        description="Pay an amount to someone (every call pays).",
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
    )
    async def pay(to: str, amount: int, ctx: Context, acknowledge_seconds: float = 0) -> str:
        await seen("pay", ctx, {"to": to, "amount": amount})
        total = await db.incrby(f"{prefix}:paid:{to}", amount)
        # Paid before answering: a caller that dies meanwhile leaves a payment it never heard
        # of (what a reviewer must find out before running the call again).
        await asyncio.sleep(min(max(acknowledge_seconds, 0.0), 30.0))
        return f"paid {amount} to {to} (total {total})"

    @server.tool(
        name=renamed.get("lookup", "lookup"),
        description="Read a counter.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def lookup(counter: str, ctx: Context) -> str:
        await seen("lookup", ctx, {"counter": counter})
        return f"{counter} = {int(await db.get(f'{prefix}:counter:{counter}') or 0)}"

    @server.tool(name="refuse", description="Always refuses.")
    async def refuse(reason: str, ctx: Context) -> str:
        await seen("refuse", ctx, {"reason": reason})
        raise ToolError(f"refused: {reason}")

    @server.tool(name="deny", description="Always refuses with a JSON-RPC error of its own.")
    async def deny(reason: str, ctx: Context) -> str:
        await seen("deny", ctx, {"reason": reason})
        # -32000: the first code of the range servers use for their own errors, which the SDK
        # also uses for a connection it saw close.
        raise MCPError(code=-32000, message=f"denied: {reason}")

    @server.tool(name="whoami", description="The X-Team header this call came with.")
    async def whoami(ctx: Context) -> str:
        await seen("whoami", ctx, {})
        return (ctx.headers or {}).get("x-team", "(none)")

    return server


class _RequireToken:
    """401 for any request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = Request(scope).headers.get("authorization", "")
            if given != f"Bearer {self.token}":
                response: Response = JSONResponse({"error": "unauthorized"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m oma.tools.mcp.counter_server")
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = build_server()
    if args.stdio:
        server.run("stdio")
        return
    import uvicorn

    app: ASGIApp = server.streamable_http_app(host=args.host)
    token = os.environ.get("MCP_COUNTER_TOKEN")
    if token:
        app = _RequireToken(app, token)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
