"""``oma console``: the reviewers' and operators' web pages (Starlette, served by uvicorn).

On a reviewer's machine it acts with their kubeconfig (``--kubeconfig``, ``--context``,
``--as``), listens on a loopback port and opens a one-time launch link in the browser. In the
cluster (``--sign-in``, the chart's ``console.enabled``) every user signs in with their own
bearer token; the console's service account only serves pages.
"""

from __future__ import annotations

import asyncio
import os
import socket
import webbrowser
from typing import Annotated

import typer

from oma.errors import MissingExtraError
from oma.extras import needs_extra
from oma_operator.cli.decisions import AsOption, ContextOption, KubeconfigOption, Target

LOOPBACK = ("127.0.0.1", "localhost", "::1")

NamespacesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        "-n",
        help="A namespace to look in when you may not list every namespace (repeatable; "
        "default: the kubeconfig context's).",
    ),
]


def register(app: typer.Typer) -> None:
    """Entry point ``oma.cli``: add ``console`` to the ``oma`` app."""

    @app.command()
    def console(
        kubeconfig: KubeconfigOption = None,
        context: ContextOption = None,
        impersonate: AsOption = None,
        namespaces: NamespacesOption = None,
        host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port (0: a free one).", min=0)] = 0,
        browser: Annotated[
            bool, typer.Option("--browser/--no-browser", help="Open the launch link.")
        ] = True,
        sign_in: Annotated[
            bool,
            typer.Option(
                "--sign-in",
                help="Serve many users, each signing in with their own bearer token (in the "
                "cluster; the API server is the pod's, or --server).",
            ),
        ] = False,
        server: Annotated[
            str | None, typer.Option(help="With --sign-in: the API server's URL.")
        ] = None,
        ca_file: Annotated[
            str | None, typer.Option(help="With --sign-in: the API server's CA bundle.")
        ] = None,
        secure_cookies: Annotated[
            bool, typer.Option(help="Cookies over https only (behind a TLS ingress).")
        ] = False,
        wait: Annotated[
            float,
            typer.Option(
                "--wait",
                min=0,
                help="Seconds a decision waits for the operator to record it in the run's store "
                "(0: not waited; the page then says it was written, not that it counts).",
            ),
        ] = 30.0,
    ) -> None:
        """Web pages to review and decide approval requests and watch runs, acting as you."""
        try:
            with needs_extra("oma console", "console"):
                import uvicorn

                from oma_operator.console.access import IN_CLUSTER_CA, LocalAccess, TokenAccess
                from oma_operator.console.app import build
                from oma_operator.console.guard import NAME
                from oma_operator.console.state import ConsoleSettings
        except MissingExtraError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

        bad = [ns for ns in namespaces or () if not NAME.match(ns)]
        if bad:
            raise typer.BadParameter(f"not a namespace name: {bad[0]!r}", param_hint="--namespace")
        access: LocalAccess | TokenAccess
        if sign_in:
            url = server or _in_cluster_server()
            ca = ca_file or (str(IN_CLUSTER_CA) if IN_CLUSTER_CA.is_file() else None)
            access = TokenAccess(url, ca)
        else:
            access = LocalAccess(Target("", None, kubeconfig, context, impersonate))
        loopback = host in LOOPBACK
        settings = ConsoleSettings(
            namespaces=tuple(namespaces or ()),
            secure_cookies=secure_cookies,
            record_wait_seconds=wait,
            hosts=("127.0.0.1", "localhost", "::1", "[::1]") if loopback else (),
        )
        app = build(access, settings)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, port), family=family)
        bound = listener.getsockname()[1]
        where = f"http://{host if ':' not in host else f'[{host}]'}:{bound}"
        if sign_in:
            typer.echo(f"oma console: serving {where} (users sign in with their own token)")
        else:
            link = f"{where}/launch?code={app.state.console.launch.code}"
            typer.echo(f"oma console: open {link}\n(a one-time link; Ctrl-C stops the console)")
            if browser:
                webbrowser.open(link)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        asyncio.run(uvicorn.Server(config).serve(sockets=[listener]))


def _in_cluster_server() -> str:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise typer.BadParameter("--sign-in outside a pod needs --server (the API server's URL)")
    return f"https://{host if ':' not in host else f'[{host}]'}:{port}"
