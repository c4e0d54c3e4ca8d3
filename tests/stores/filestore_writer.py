"""Child process for the crash test: writes a FileStore in a tight loop until killed.

Before each write it prints the sequence number it is about to write, so the parent knows which
write a SIGKILL interrupted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

from oma.store import FileStore


def payload_for(sequence: int) -> str:
    return ("abcdefghij" * ((sequence * 7919) % 5000))[: (sequence * 7919) % 50000]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def main(path: str) -> None:
    store = FileStore(path)
    entry = await store.get("state")
    sequence = json.loads(entry.value)["i"] if entry is not None else 0
    while True:
        sequence += 1
        payload = payload_for(sequence)
        sys.stdout.write(f"{sequence}\n")
        sys.stdout.flush()
        value = json.dumps({"i": sequence, "payload": payload, "sha": digest(payload)})
        await store.set("state", value, {"i": sequence})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
