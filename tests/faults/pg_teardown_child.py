"""Child of ``test_postgres_teardown``: end ``asyncio.run`` while a store connection is in flight.

Usage: ``python -m tests.faults.pg_teardown_child <dsn-through-proxy>``. The proxy forwards the
first connection and holds every later one unanswered, so the second concurrent operation of
the store is still connecting when ``main`` returns and ``asyncio.run`` cancels every task and
waits for each. ``main`` returns once the parent, which sees the proxy hold that connection,
writes a line to its stdin. The store is deliberately never closed, like a run that ends
without ``aclose()``. Exit 0 means the loop shut down; a hang is the bug.
"""

from __future__ import annotations

import asyncio
import sys

from oma.store.postgres import PostgresStore


async def main(dsn: str) -> None:
    store = PostgresStore(dsn, table="teardown", connect_timeout=30)
    await store.open()
    await store.set("k", "v")
    # Two at once: the second needs a connection of its own, which the proxy never answers.
    for _ in range(2):
        asyncio.get_running_loop().create_task(store.get("k"))
    await asyncio.to_thread(sys.stdin.readline)  # the parent: "the proxy holds the second one"
    print("returning with a connection attempt in flight", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
    print("loop shut down", flush=True)
