"""SIGKILL a FileStore writer at random moments; the file must always hold a whole state."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oma.store import FileStore
from tests.stores.filestore_writer import digest

KILLS = 200
WRITER = Path(__file__).with_name("filestore_writer.py")


def _start_writer(path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WRITER.parents[2]), *sys.path])}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(path)], stdout=subprocess.PIPE, text=True, env=env
    )


def _kill_at_random_moment(child: subprocess.Popen[str], rng: random.Random) -> list[int]:
    assert child.stdout is not None
    first = child.stdout.readline()  # the writer loaded the store and is about to write
    assert first, "the writer died before its first write"
    time.sleep(rng.uniform(0, 0.04))
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()
    child.wait()
    return [int(line) for line in [first, *rest.splitlines()] if line.strip()]


def _stored_sequence(path: Path) -> int:
    async def read() -> int:
        entry = await FileStore(path).get("state")
        if entry is None:
            return 0
        state = json.loads(entry.value)
        assert digest(state["payload"]) == state["sha"], "payload torn"
        assert entry.metadata == {"i": state["i"]}, "metadata from another write"
        return int(state["i"])

    return asyncio.run(read())


@pytest.mark.crash
@pytest.mark.timeout(900)
def test_sigkill_never_leaves_a_torn_or_unloadable_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rng = random.Random(20261129)
    previous = 0
    interrupted_mid_write = 0
    for _ in range(KILLS):
        child = _start_writer(path)
        intents = _kill_at_random_moment(child, rng)
        last_intent = intents[-1]
        stored = _stored_sequence(path)
        # The interrupted write either landed whole or not at all; nothing earlier was lost.
        assert stored in (last_intent - 1, last_intent), (stored, last_intent)
        assert stored >= previous
        interrupted_mid_write += stored == last_intent - 1
        previous = stored
        leftovers = list(tmp_path.glob("state.json.tmp-*"))
        assert all(f"tmp-{child.pid}-" in p.name for p in leftovers), leftovers
    # Temp files of killed writers never block later writes and are swept by the next load.
    assert _stored_sequence(path) == previous

    async def final_write() -> None:
        await FileStore(path).set("after", "ok")

    asyncio.run(final_write())
    assert list(tmp_path.glob("state.json.tmp-*")) == []
    assert interrupted_mid_write > 0, "no kill landed inside a write; the test proved nothing"
    print(f"\n{KILLS} kills, {interrupted_mid_write} inside a write, final sequence {previous}")
