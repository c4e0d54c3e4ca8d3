"""``python -m demolib`` (what ``hack/demo`` runs).

Exit codes: 0 every step happened as expected; 1 a step did not (the message says which, the
operator's log tail follows); 2 something the demo needs is missing (Kubernetes binaries,
kubectl, helm, redis-server, the oma commands); 130 interrupted. Everything it started is
stopped and its temporary directory removed in every case.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import get_args

from demolib.infra import ensure_image
from demolib.story import Approver, demo
from demolib.views import DemoError, MissingTool
from devcluster.errors import DevClusterError, MissingBinaryError
from devcluster.images import OMA_IMAGE
from devcluster.sandbox import real_node_possible


class Missing(Exception):
    pass


async def _main(namespace: str, approver: Approver, image: str | None) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()

    def stop() -> None:
        # Cancelled again until it is done: on Python 3.11 a cancellation that meets a
        # completing asyncio.wait_for (inside a client library) can be swallowed.
        if not task.done():
            task.cancel()
            loop.call_later(0.5, stop)

    # Ctrl-C and SIGTERM unwind alike: every child stopped, the temp dir removed.
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        await demo(namespace, approver, image)
    except MissingBinaryError as exc:
        raise Missing(str(exc)) from exc
    except DevClusterError as exc:  # the cluster did not come up: say why, no traceback
        raise DemoError(f"the local cluster did not start: {exc}") from exc


def main() -> int:
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="oma-demo", help="namespace to install into")
    parser.add_argument(
        "--approve-with",
        choices=get_args(Approver),
        default="kubectl",
        help="decide with `kubectl patch` (default) or `oma approve`",
    )
    parser.add_argument(
        "--node-agent",
        action="store_true",
        help="run pods on the node agent (local processes) instead of a real node: for "
        "machines without containerd (docs/local-cluster.md)",
    )
    parser.add_argument("--in-sandbox", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        without = real_node_possible()
        if not args.node_agent and not args.in_sandbox and without is not None:
            print(f"demo: no real node here ({without}): pods run on the node agent", flush=True)
            args.node_agent = True
        if not args.node_agent and not args.in_sandbox:
            ensure_image()  # here: the sandbox has no network for a build
            # A real node lives in namespaces of its own (also when this runs in another
            # sandbox): the whole demo runs in there.
            argv = [sys.executable, "-m", "devcluster", "sandbox", "--", sys.executable]
            os.execvp(sys.executable, [*argv, "-m", "demolib", *sys.argv[1:], "--in-sandbox"])
        image = None if args.node_agent else OMA_IMAGE
        asyncio.run(_main(args.namespace, args.approve_with, image))
    except (Missing, MissingTool) as exc:
        print(f"demo: missing: {exc}", file=sys.stderr, flush=True)
        return 2
    except DemoError as exc:
        print(f"\ndemo FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ndemo interrupted: everything it started is stopped", file=sys.stderr, flush=True)
        return 130
    print("\ndemo OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
