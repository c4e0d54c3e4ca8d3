"""The per-TeamRun lock every status write from the operator's knowledge holds
(``runs.attempts.recording``): one lock per run while it is used, none kept after."""

from __future__ import annotations

import asyncio
import gc

from oma_operator.runs import attempts


async def test_one_lock_per_run_while_it_is_held_or_awaited() -> None:
    order: list[str] = []

    async def write(tag: str) -> None:
        async with attempts.recording("ns", "run-a"):
            order.append(f"{tag} in")
            await asyncio.sleep(0)  # let the other writer try meanwhile
            order.append(f"{tag} out")

    await asyncio.gather(write("first"), write("second"))
    assert order == ["first in", "first out", "second in", "second out"]
    assert attempts.recording("ns", "run-a") is not attempts.recording("ns", "run-b")


async def test_no_lock_is_kept_for_a_run_nobody_writes() -> None:
    for n in range(200):
        async with attempts.recording("ns", f"finished-{n}"):
            pass
    gc.collect()
    assert not [key for key in attempts._recording if key[1].startswith("finished-")]
