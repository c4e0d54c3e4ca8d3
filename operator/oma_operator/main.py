"""``oma-operator``: run the kopf operator for one namespace (or all, with --all-namespaces)."""

from __future__ import annotations

import argparse
import asyncio
import logging

import kopf

from oma_operator import handlers  # noqa: F401  (registers the handlers)


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
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=bool(args.all_namespaces),
            namespaces=args.namespace or [],
            liveness_endpoint=args.liveness,
        )
    )


if __name__ == "__main__":
    main()
