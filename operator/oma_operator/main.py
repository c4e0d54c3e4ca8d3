"""``oma-operator``: run the kopf operator for one namespace (or all, with --all-namespaces)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

import kopf

from oma_operator import handlers, login, runtime  # noqa: F401 (importing registers handlers)
from oma_operator.metrics import serve
from oma_operator.run_queue import RUN_QUEUE, limits_from_env
from oma_operator.uninstall import stop_operator

T = TypeVar("T")
DEFAULT_METRICS_PORT = 8000  # 8080 is the chart's liveness port


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535)")
    return port


def main() -> None:
    parser = argparse.ArgumentParser(prog="oma-operator", description=__doc__)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default=None,
        help="serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    # String defaults go through ``type`` too, so a bad environment value gets a clear error.
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=os.environ.get("OMA_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
        help="serve Prometheus metrics on this port at /metrics; 0 turns them off "
        f"(env OMA_METRICS_PORT, default {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--metrics-address",
        default=os.environ.get("OMA_METRICS_ADDRESS", "0.0.0.0"),
        help="the address the metrics endpoint listens on (env OMA_METRICS_ADDRESS)",
    )
    parser.add_argument(
        "--runner-metrics-port",
        type=_port,
        default=os.environ.get("OMA_RUNNER_METRICS_PORT", "0"),
        help="have runner pods serve their metrics on this port (named container port "
        "'metrics'); 0, the default, leaves them without (env OMA_RUNNER_METRICS_PORT)",
    )
    parser.add_argument(
        "--stop-deployment",
        metavar="NAME",
        help="do not run: scale the operator Deployment NAME in --namespace to 0, wait until its "
        "pods are gone, release the runner pods it tracked, exit (the chart's pre-delete hook)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=90.0,
        help="seconds --stop-deployment waits for the pods (default 90)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.stop_deployment:
        if not args.namespace or len(args.namespace) != 1:
            parser.error("--stop-deployment needs exactly one --namespace (the Deployment's)")
        stop = stop_operator(args.namespace[0], args.stop_deployment, args.stop_timeout)
        raise SystemExit(asyncio.run(_connected(stop)))
    RUN_QUEUE.configure(limits_from_env())
    runtime.RUNNER_METRICS_PORT = args.runner_metrics_port or None
    runtime.NAMESPACES = [] if args.all_namespaces else list(args.namespace or [])
    serve(args.metrics_port, args.metrics_address)
    asyncio.run(
        _connected(
            kopf.operator(
                standalone=True,
                clusterwide=bool(args.all_namespaces),
                namespaces=args.namespace or [],
                liveness_endpoint=args.liveness,
            )
        )
    )


async def _connected(work: Coroutine[Any, Any, T]) -> T:
    """``work`` with the API client connected first, closed after."""
    try:
        await runtime.connect()
        return await work
    finally:
        work.close()  # never awaited if the connection failed: no "never awaited" warning
        await runtime.close()


if __name__ == "__main__":
    main()
