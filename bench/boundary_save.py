"""Per-boundary save of a long run against the store's own durable write of the same bytes.

    .venv/bin/python bench/boundary_save.py [--quick] [--turns 1000] [--backends redis,postgres]
        [--breakdown]

Starts Redis with its append-only file fsynced at every write and PostgreSQL with durable
commits (``fsync``, ``synchronous_commit`` and full pages on, as a production server runs), as
child processes. Runs a task of ``--turns`` turns (a tool call each, saved fenced at every
boundary in the journal layout with history, as ``oma run`` saves) and times each of the
checkpoint writer's saves (``JournalWriter.save``: the delta's diff and encoding, its chain
header, and the store's write or writes), recording the records each save wrote. Right after
each save it writes the same records with the client library alone, one durable write, the
baseline (pair by pair, so that both see the same load): Redis ``RPUSH`` of them, PostgreSQL
one autocommit ``INSERT`` of them (sent in binary) into a table of ``(key, seq, record)``.
Prints p50/p99 of both and the ratio; a save that compacts (a new base and its segments) is
counted as the boundary it is. ``--breakdown`` also prints the p50 per save of the delta's diff,
the chain header, the store's writes and the rest (where a save's time goes besides the write).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "src")]

import psycopg  # noqa: E402
import redis.asyncio as redis_asyncio  # noqa: E402
from benchlib import header, percentile  # noqa: E402
from restore_cost import run_journal  # noqa: E402
from tests.servers.postgres_server import PostgresServer, postgres_bin_dir  # noqa: E402
from tests.servers.redis_server import RedisServer, redis_binary  # noqa: E402

from oma.checkpoint import delta_diff, journal  # noqa: E402
from oma.store import PostgresStore, RedisStore  # noqa: E402
from oma.store.base import close_store  # noqa: E402
from oma.store.journal import JournalStore  # noqa: E402

PLAIN_TABLE = "oma_bench_plain_journal"


PlainWrite = Callable[[list[str]], Awaitable[None]]
# What --breakdown times inside each save: the delta's diff against the last boundary, the
# chain header and its digest, and the store's journal writes (timed in every run).
PARTS = ("diff", "chain", "store")


class Recorder:
    """Times each ``JournalWriter.save``, keeps the records every store write made in it, and
    right after it times the client's plain write of the same records: pair by pair, under the
    same load."""

    def __init__(self, plain: PlainWrite) -> None:
        self.plain = plain
        self.saves: list[float] = []  # ms per boundary
        self.baseline: list[float] = []  # ms per boundary, the client alone
        self.writes: list[list[str]] = []  # the records written per boundary
        self.parts: dict[str, list[float]] = {part: [] for part in PARTS}  # ms per boundary
        self._open: list[str] | None = None
        self._spent = dict.fromkeys(PARTS, 0.0)  # seconds in each part, this save so far

    def install(self, breakdown: bool = False) -> Callable[[], None]:
        """Time the saves; with ``breakdown`` also their diff and chain header (a wrapper
        around each, which costs a microsecond or two of its own)."""
        original = journal.JournalWriter.save
        recorder = self

        async def timed(self: journal.JournalWriter, *args: Any, **kwargs: Any) -> None:
            recorder._open = []
            recorder._spent = dict.fromkeys(PARTS, 0.0)
            started = time.perf_counter()
            try:
                await original(self, *args, **kwargs)
            finally:
                recorder.saves.append((time.perf_counter() - started) * 1000)
                records, recorder._open = recorder._open, None
                recorder.writes.append(records)
                for part, seconds in recorder._spent.items():
                    recorder.parts[part].append(seconds * 1000)
            started = time.perf_counter()
            if records:
                await recorder.plain(records)
            recorder.baseline.append((time.perf_counter() - started) * 1000)

        journal.JournalWriter.save = timed  # type: ignore[method-assign]
        diff, chained = delta_diff.DeltaEncoder.diff, journal.JournalWriter._chained

        def diff_timed(self: delta_diff.DeltaEncoder, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return diff(self, *args)
            finally:
                recorder._spent["diff"] += time.perf_counter() - started

        def chained_timed(self: journal.JournalWriter, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return chained(self, *args, **kwargs)
            finally:
                recorder._spent["chain"] += time.perf_counter() - started

        if breakdown:
            delta_diff.DeltaEncoder.diff = diff_timed  # type: ignore[method-assign]
            journal.JournalWriter._chained = chained_timed  # type: ignore[method-assign]

        def undo() -> None:
            journal.JournalWriter.save = original  # type: ignore[method-assign]
            delta_diff.DeltaEncoder.diff = diff  # type: ignore[method-assign]
            journal.JournalWriter._chained = chained  # type: ignore[method-assign]

        return undo

    def wrap(self, store: JournalStore) -> None:
        """Note the records of each journal write ``store`` makes (instance attribute: the
        store's class is left alone)."""
        write = store.journal_write
        recorder = self

        async def noted(key: str, records: Any, **kwargs: Any) -> bool:
            if recorder._open is not None:
                recorder._open.extend(records)
            started = time.perf_counter()
            try:
                return await write(key, records, **kwargs)
            finally:
                recorder._spent["store"] += time.perf_counter() - started

        store.journal_write = noted  # type: ignore[method-assign]


async def plain_redis(url: str) -> tuple[PlainWrite, Callable[[], Awaitable[None]]]:
    client = redis_asyncio.Redis.from_url(url)

    async def write(records: list[str]) -> None:
        await client.rpush("plain-journal", *records)

    return write, client.aclose


async def plain_postgres(dsn: str) -> tuple[PlainWrite, Callable[[], Awaitable[None]]]:
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await connection.execute(
        f"CREATE TABLE IF NOT EXISTS {PLAIN_TABLE} "
        "(key text NOT NULL, seq integer NOT NULL, record bytea NOT NULL, PRIMARY KEY (key, seq))"
    )
    # The records in binary, as the store sends them: the client's cheapest form of the write.
    insert = (
        f"INSERT INTO {PLAIN_TABLE} (key, seq, record) "
        "SELECT 'run', %s + t.ord, t.record FROM unnest(%b::bytea[]) WITH ORDINALITY AS t "
        "(record, ord)"
    )
    seq = 0

    async def write(records: list[str]) -> None:
        nonlocal seq
        await connection.execute(insert, (seq, [r.encode() for r in records]))
        seq += len(records)

    return write, connection.close


async def measure(
    name: str,
    store: JournalStore,
    plain: tuple[PlainWrite, Callable[[], Awaitable[None]]],
    turns: int,
    breakdown: bool = False,
) -> None:
    write, close = plain
    recorder = Recorder(write)
    recorder.wrap(store)
    undo = recorder.install(breakdown)
    try:
        await run_journal(store, turns)  # type: ignore[arg-type]
    finally:
        undo()
        await close()
    saves, baseline, n = recorder.saves, recorder.baseline, len(recorder.saves)
    written = sum(len(r) for records in recorder.writes for r in records)
    print(
        f"{name:9} {turns:>6} {n:>6} {statistics.median(saves):8.3f} {percentile(saves, 0.99):8.3f}"
        f" {statistics.median(baseline):8.3f} {percentile(baseline, 0.99):8.3f}"
        f" {statistics.median(saves) / statistics.median(baseline):6.2f}x"
        f" {sum(saves) / sum(baseline):6.2f}x {written / n:9.0f}"
    )
    if breakdown:
        parts = {part: statistics.median(spent) for part, spent in recorder.parts.items()}
        rest = statistics.median(
            save - sum(recorder.parts[part][i] for part in PARTS) for i, save in enumerate(saves)
        )
        print(
            f"{'':9} p50 ms: diff {parts['diff']:.3f}, chain {parts['chain']:.3f}, store write "
            f"{parts['store']:.3f}, the rest {rest:.3f}; client {statistics.median(baseline):.3f}"
        )


async def main(args: argparse.Namespace) -> None:
    print(header("boundary save", args.quick))
    print(
        "per boundary, ms: save = JournalWriter.save (diff, encoding, header, store writes); "
        "client = the\nclient's durable write of the same records alone (Redis RPUSH with "
        "appendfsync always; PostgreSQL\none autocommit INSERT, records in binary, fsync and "
        "synchronous_commit on); x = p50 / client p50;\nsum x = total / client total; "
        "bytes = written per boundary\n"
    )
    print(
        f"{'backend':9} {'turns':>6} {'bound.':>6} {'save p50':>8} {'p99':>8} {'client':>8} "
        f"{'p99':>8} {'x':>7} {'sum x':>7} {'bytes':>9}"
    )
    if "redis" in args.backends:
        server = RedisServer(redis_binary(), persistent=True).start()
        try:
            store = RedisStore(server.url, namespace="bench")
            plain = await plain_redis(server.url)
            await measure("redis", store, plain, args.turns, args.breakdown)
            await close_store(store)
        finally:
            server.close()
    if "postgres" in args.backends:
        bin_dir = postgres_bin_dir()
        assert bin_dir is not None, "PostgreSQL is not installed"
        pg = PostgresServer(bin_dir, durable=True).start()
        try:
            pg_store = PostgresStore(pg.dsn(), schema="bench")
            await pg_store.open()
            plain = await plain_postgres(pg.dsn())
            await measure("postgres", pg_store, plain, args.turns, args.breakdown)
            await close_store(pg_store)
        finally:
            pg.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 turns")
    parser.add_argument("--turns", type=int, default=None, help="default 1000")
    parser.add_argument(
        "--backends", type=lambda text: text.split(","), default=["redis", "postgres"]
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also the p50 of each save's diff, chain header and store write",
    )
    args = parser.parse_args(argv)
    args.turns = args.turns or (100 if args.quick else 1000)
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
