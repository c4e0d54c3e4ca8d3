"""``python -m demolib`` (what ``hack/demo`` runs).

Exit codes: 0 every step happened as expected; 1 a step did not (the message says which, the
operator's log tail follows); 2 something the demo needs is missing (Kubernetes binaries,
kubectl, helm, redis-server, the oma commands); 130 interrupted. Everything it started is
stopped and its temporary directory removed in every case.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import get_args

from demolib.story import Approver, demo
from demolib.views import DemoError, MissingTool
from devcluster.errors import MissingBinaryError


class Missing(Exception):
    pass


async def _main(namespace: str, approver: Approver) -> None:
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
        await demo(namespace, approver)
    except MissingBinaryError as exc:
        raise Missing(str(exc)) from exc


def main() -> int:
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="oma-demo", help="namespace to install into")
    parser.add_argument(
        "--approve-with",
        choices=get_args(Approver),
        default="kubectl",
        help="decide with `kubectl patch` (default) or `oma approve`",
    )
    args = parser.parse_args()
    try:
        asyncio.run(_main(args.namespace, args.approve_with))
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
