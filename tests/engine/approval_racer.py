"""Child process of the approval race: tries to decide one request, prints what happened."""

from __future__ import annotations

import asyncio
import sys

from oma.approval import DurableApprovalError, decide_approval
from oma.store import PostgresStore, RedisStore, open_store


async def main(url: str, request_id: str, request_hash: str, worker: str, tries: int) -> None:
    store = open_store(url)
    outcomes = []
    for n in range(tries):
        try:
            await decide_approval(
                store,
                request_id=request_id,
                request_hash=request_hash,
                decision="approve" if n % 2 else "reject",
                reviewer={"id": f"{worker}-{n}"},
            )
            outcomes.append("won")
        except DurableApprovalError as exc:
            outcomes.append(exc.code)
    if isinstance(store, RedisStore | PostgresStore):
        await store.aclose()
    print(" ".join(outcomes))


if __name__ == "__main__":
    url, request_id, request_hash, worker, tries = sys.argv[1:6]
    asyncio.run(main(url, request_id, request_hash, worker, int(tries)))
