"""The liveness endpoint of a standby: it is alive (it watches the lease), so the kubelet must
not restart it. The leader's endpoint is kopf's (``--liveness``), served once it leads."""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp.web


async def serve_standby_liveness(endpoint: str) -> aiohttp.web.AppRunner:
    """Answer ``GET <path>`` of ``endpoint`` (e.g. ``http://0.0.0.0:8080/healthz``) with 200
    and ``{"leader": false}``; the caller cleans the returned runner up before kopf serves it."""
    parts = urlsplit(endpoint)

    async def alive(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"leader": False})

    app = aiohttp.web.Application()
    app.add_routes([aiohttp.web.get(parts.path or "/", alive)])
    runner = aiohttp.web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, parts.hostname or "0.0.0.0", parts.port or 80)
    await site.start()
    return runner
