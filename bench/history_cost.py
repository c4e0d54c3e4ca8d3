"""History cost: what keeping every boundary of a run stores, and whether each one comes back.

    .venv/bin/python bench/history_cost.py [--quick] [--backends memory,redis,postgres]

(``--quick``: one run of 30 turns, in memory unless ``--backends`` says otherwise.)

Runs a task of 100, 300 and 1,000 turns (a tool call each, saved fenced at every boundary as
``oma run`` saves; ``restore_cost.run_journal``) into each store with the default history
(every boundary kept), recording every snapshot the journal writer is handed. Prints:

- the bytes the history keeps (every record, headers included, and the segments its bases
  name: ``oma.checkpoint.segments``) against the final snapshot's
  (the issue's bound: at most 4x), and what the same run keeps with history off (its latest
  journal only, the baseline measured in the same run);
- every boundary rebuilt in one pass (``History.walk``) and compared with the recording, byte
  for byte, and the time the pass took;
- one byte flipped in records spread over the journal (the middle of each one's body), each
  checked with ``History.verify``: the record it names must be the one flipped.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import backends, header, parse_backends
from restore_cost import RUN_ID, run_journal

from oma import jsonutil
from oma.checkpoint import chain, segments
from oma.checkpoint.history import History
from oma.checkpoint.journal import JournalWriter
from oma.checkpoint.keys import checkpoint_key, segments_journal_key
from oma.checkpoint.retention import HistoryPolicy
from oma.store import JournalStore

TURNS = (100, 300, 1000)
QUICK_TURNS = (30,)
FLIPS = 40


class Recording:
    """Every snapshot a journal writer is handed, as JSON text (wraps the class's methods)."""

    def __init__(self) -> None:
        self.saved: list[str] = []
        self._save, self._init = JournalWriter.save, JournalWriter.__init__

    def __enter__(self) -> Recording:
        save, saved = self._save, self.saved

        async def recording(writer: JournalWriter, wire: Any, *args: Any) -> None:
            saved.append(jsonutil.dumps(wire))
            await save(writer, wire, *args)

        JournalWriter.save = recording  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        JournalWriter.save = self._save  # type: ignore[method-assign]


def history_off(policy: HistoryPolicy | None) -> Any:
    """Run with a writer whose history is ``policy`` (``None``: off), whatever the run asks."""
    init = JournalWriter.__init__

    def forced(writer: JournalWriter, *args: Any, **kwargs: Any) -> None:
        init(writer, *args, **{**kwargs, "history": policy})

    return init, forced


async def measure(store: JournalStore, off_store: JournalStore, turns: int) -> dict[str, Any]:
    key = checkpoint_key(RUN_ID)
    with Recording() as recording:
        final = await run_journal(store, turns)
    init, forced = history_off(None)
    JournalWriter.__init__ = forced  # type: ignore[method-assign]
    try:
        await run_journal(off_store, turns)
    finally:
        JournalWriter.__init__ = init  # type: ignore[method-assign]
    entry = await store.journal_get(key, history=True)
    off = await off_store.journal_get(key, history=True)
    assert entry is not None and off is not None
    side = segments.by_number(await store.journal_get(segments_journal_key(key), history=True))
    kept = sum(len(r) for r in entry.records) + sum(len(t) for t in side.values())
    history = History.of(entry, side)
    started = time.perf_counter()
    mismatches = boundaries = 0
    for seq, document in history.walk():
        boundaries += 1
        if jsonutil.dumps(document) != recording.saved[seq - 1]:
            mismatches += 1
    walked = time.perf_counter() - started
    found = flips_found(entry, side)
    return {
        "turns": turns,
        "final": len(final),
        "kept": kept,
        "off": sum(len(r) for r in off.records),
        "records": len(entry.records),
        "segments": len(side),
        "boundaries": boundaries,
        "saves": len(recording.saved),
        "mismatches": mismatches,
        "walk_s": walked,
        "flips": found,
    }


def _flipped(text: str) -> str:
    line, body = chain.split(text)
    at = (len(line) + 1 if line else 0) + len(body) // 2
    return text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :]


def flips_found(entry: Any, side: dict[int, str]) -> tuple[int, int]:
    """(found at exactly the flipped record, flips tried): records of the journal, and of its
    segments journal (found as that segment)."""
    rng = random.Random(7)
    numbers = sorted(rng.sample(range(len(entry.records)), min(FLIPS, len(entry.records))))
    exact = 0
    for number in numbers:
        records = list(entry.records)
        records[number - entry.start] = _flipped(records[number - entry.start])
        findings = History.of(entry.model_copy(update={"records": records}), side).verify()
        exact += [(f.number, f.segment) for f in findings] == [(number, False)]
    # every segment the history names (one that none names is no part of any boundary)
    named = sorted(n for r in entry.records for n in _named(r))
    picked = sorted(rng.sample(named, min(FLIPS // 4, len(named))))
    for number in picked:
        findings = History.of(entry, {**side, number: _flipped(side[number])}).verify()
        exact += [(f.number, f.segment) for f in findings] == [(number, True)]
    return exact, len(numbers) + len(picked)


def _named(record: str) -> set[int]:
    if segments.MARK not in record:
        return set()
    return segments.named_numbers(jsonutil.loads(chain.split(record)[1]))


async def main(args: argparse.Namespace) -> None:
    print(header("history cost: every boundary of a real run kept", args.quick))
    print(
        "kept: every record the history keeps; off: the same run with history off (latest "
        "journal only); rebuilt: boundaries walked and compared with the recording of every save"
    )
    with tempfile.TemporaryDirectory() as workdir:
        async with backends(Path(workdir), args.backends) as factories:
            await _rows(factories, args.quick)


async def _rows(factories: dict[str, Any], quick: bool) -> None:
    for name, make in factories.items():
        for turns in QUICK_TURNS if quick else TURNS:
            store, off_store = await make(), await make()
            try:
                row = await measure(store, off_store, turns)
            finally:
                for s in (store, off_store):
                    close = getattr(s, "aclose", None)
                    if close is not None:
                        await close()
            final = row["final"]
            print(
                f"{name:9} {turns:>5} turns  final {final / 1e3:8.1f} KB  "
                f"kept {row['kept'] / 1e3:8.1f} KB ({row['kept'] / final:4.2f}x)  "
                f"off {row['off'] / 1e3:8.1f} KB ({row['off'] / final:4.2f}x)  "
                f"records {row['records']:>5} + {row['segments']:>3} segments  "
                f"rebuilt {row['boundaries']}/{row['saves']} "
                f"identical {row['boundaries'] - row['mismatches']} in {row['walk_s']:.2f} s  "
                f"flips found exactly {row['flips'][0]}/{row['flips'][1]}"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run (smoke tests)")
    parser.add_argument("--backends", type=parse_backends, default=["memory", "redis", "postgres"])
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
