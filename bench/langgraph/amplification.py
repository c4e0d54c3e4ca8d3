"""LangGraph's checkpointing on oma's long-conversation workload: write amplification and time
per checkpoint, with LangGraph's default channels and with its ``DeltaChannel``.

    <venv>/bin/python bench/langgraph/amplification.py [--turns 10,300,1000]
        [--postgres-url URL] [--backends memory,postgres] [--durability sync] [--json]

Runs in a virtual environment of its own, made from ``bench/langgraph/requirements.txt``, and
never imports oma: ``bench/checkpoint_overhead.py --langgraph`` makes that environment and runs
this script there against the PostgreSQL it started, and prints these rows under its own.

The workload is ``amplification()`` of ``bench/checkpoint_overhead.py``: one conversation
started by "Long: Many turns.", a scripted model that calls the tool ``note`` once per turn
and answers "done" on the last turn, a tool that answers "noted <note>". Savers: LangGraph's
in-memory one and ``AsyncPostgresSaver`` (each run in a schema of its own, dropped after it is
measured); no Redis saver, langgraph-checkpoint-redis needing the RedisJSON and RediSearch
modules. Durability ``sync`` by default: each checkpoint is saved before the next step runs,
as oma's fenced saves are.

The project's mypy run leaves ``bench/`` out; this script type-checks strictly against its
venv: ``.venv/bin/mypy --python-executable <venv>/bin/python bench/langgraph/amplification.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import partial
from importlib.metadata import version
from itertools import count
from typing import Annotated, Any, Literal, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.graph.state import CompiledStateGraph
from psycopg import sql

LAYOUTS = ("default", "delta")
BACKENDS = ("memory", "postgres")
# DeltaChannel's own default, kept: the benchmark measures LangGraph as it ships. Every 100th
# update of the channel stores the whole message list (a snapshot); the others store nothing
# in the checkpoint, the node's write (the new messages) being in checkpoint_writes anyway.
SNAPSHOT_FREQUENCY = 100
THREAD = "amp"
Durability = Literal["sync", "async"]


class DefaultState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class DeltaState(TypedDict):
    # The batch reducer LangGraph documents for DeltaChannel (``reducer(state, writes)``);
    # ``add_messages`` takes one write at a time.
    messages: Annotated[
        list[AnyMessage],
        DeltaChannel(_messages_delta_reducer, snapshot_frequency=SNAPSHOT_FREQUENCY),
    ]


class Conversation(TypedDict):
    """What the nodes read: the messages whichever channel keeps them (no reducer of its own:
    a node's input schema without one leaves the graph's channel as it is)."""

    messages: list[AnyMessage]


Update = dict[str, list[AnyMessage]]


def build_graph(
    layout: str, turns: int, saver: BaseCheckpointSaver[Any] | None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """model -> tools -> model ... -> END, the model scripted as oma's ``ScriptedAdapter``."""

    async def model(state: Conversation) -> Update:
        turn = len(state["messages"]) // 2  # the prompt, then a call and its result per turn
        if turn == turns - 1:
            return {"messages": [AIMessage(content="done")]}
        call = ToolCall(name="note", args={"note": f"finding {turn} " * 8}, id=f"c{turn}")
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    async def tools(state: Conversation) -> Update:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        return {
            "messages": [
                ToolMessage(content=f"noted {call['args']['note']}", tool_call_id=call["id"])
                for call in last.tool_calls
            ]
        }

    def route(state: Conversation) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(
        DefaultState if layout == "default" else DeltaState
    )
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


async def run(
    layout: str,
    turns: int,
    durability: Durability,
    saver: BaseCheckpointSaver[Any] | None,
) -> float:
    """The conversation's seconds, from the first step to the answer "done"."""
    graph = build_graph(layout, turns, saver)
    # Two supersteps per turn (model, tools); the default limit of 25 would stop at 12 turns.
    config: RunnableConfig = {
        "configurable": {"thread_id": THREAD},
        "recursion_limit": 2 * turns + 10,
    }
    started = time.perf_counter()
    result = await graph.ainvoke(
        {"messages": [HumanMessage("Long: Many turns.")]},
        config,
        durability=durability if saver is not None else None,
    )
    seconds = time.perf_counter() - started
    messages = result["messages"]
    assert len(messages) == 2 * turns and messages[-1].content == "done", len(messages)
    return seconds


@dataclass(frozen=True)
class Stored:
    written: int  # every byte of every row the saver stored in the run
    checkpoints: int
    final: int  # the last checkpoint's row and the blobs of its channel versions


def column_bytes(value: object) -> int:
    """A column's bytes as ``postgres_stored`` counts a Postgres column's (see ``HEADER``)."""
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, int):
        return 4  # an INTEGER column (a write's index)
    raise TypeError(f"no column size for {type(value).__name__}")


def row_bytes(*columns: object) -> int:
    return sum(column_bytes(column) for column in columns)


def memory_stored(saver: InMemorySaver) -> Stored:
    """The in-memory saver's dicts as the rows of the Postgres tables: the same columns (ids,
    ``type`` and serialized bytes), its msgpack bytes where Postgres has JSONB or BYTEA."""
    (ns, by_id), *others = saver.storage[THREAD].items()
    assert not others, "one checkpoint namespace"
    checkpoints = {
        checkpoint_id: row_bytes(THREAD, ns, checkpoint_id, parent, *checkpoint, *metadata)
        for checkpoint_id, (checkpoint, metadata, parent) in by_id.items()
    }
    blobs = {key: row_bytes(*key, *typed) for key, typed in saver.blobs.items()}
    writes = sum(
        row_bytes(*outer, task_id, idx, channel, *typed, path)
        for outer, inner in saver.writes.items()
        for (task_id, idx), (_, channel, typed, path) in inner.items()
    )
    last = max(by_id)  # checkpoint ids sort in creation order, as the savers' "latest" query
    versions = saver.serde.loads_typed(by_id[last][0])["channel_versions"]
    final = checkpoints[last] + sum(
        blobs.get((THREAD, ns, channel, version), 0) for channel, version in versions.items()
    )
    return Stored(sum(checkpoints.values()) + sum(blobs.values()) + writes, len(by_id), final)


TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


async def row_size_sql(conn: psycopg.AsyncConnection[Any], table: str, alias: str) -> sql.Composed:
    """``octet_length`` of every column of ``alias`` (a row of ``table``), summed."""
    cursor = await conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    terms: list[sql.Composable] = []
    for name, data_type in await cursor.fetchall():
        column = sql.Identifier(alias, name)
        if data_type == "bytea":
            terms.append(sql.SQL("coalesce(octet_length({}), 0)").format(column))
        elif data_type == "integer":
            terms.append(sql.SQL("4"))
        else:  # text, and JSONB as its text
            terms.append(sql.SQL("coalesce(octet_length({}::text), 0)").format(column))
    return sql.SQL(" + ").join(terms)


async def postgres_stored(conn: psycopg.AsyncConnection[Any]) -> Stored:
    rows = {table: await row_size_sql(conn, table, "r") for table in TABLES}
    written = 0
    for table, size in rows.items():
        query = sql.SQL("SELECT coalesce(sum({}), 0) FROM {} r").format(size, sql.Identifier(table))
        written += int((await (await conn.execute(query)).fetchall())[0][0])
    checkpoint_size = await row_size_sql(conn, "checkpoints", "c")
    blob_size = await row_size_sql(conn, "checkpoint_blobs", "b")
    # The last checkpoint and the blobs it points at, joined as the saver's own SELECT does.
    final_query = sql.SQL(
        "SELECT {} + coalesce((SELECT sum({}) FROM checkpoint_blobs b"
        " JOIN jsonb_each_text(c.checkpoint -> 'channel_versions') v"
        " ON b.channel = v.key AND b.version = v.value"
        " WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns), 0),"
        " (SELECT count(*) FROM checkpoints)"
        " FROM checkpoints c ORDER BY c.checkpoint_id DESC LIMIT 1"
    ).format(checkpoint_size, blob_size)
    final, checkpoints = (await (await conn.execute(final_query)).fetchall())[0]
    return Stored(written, int(checkpoints), int(final))


SaverRun = Callable[[BaseCheckpointSaver[Any]], Awaitable[float]]


class MemoryBackend:
    name = "lg-memory"

    async def measure(self, body: SaverRun) -> tuple[float, Stored]:
        saver = InMemorySaver()
        seconds = await body(saver)
        return seconds, memory_stored(saver)


class PostgresBackend:
    name = "lg-postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.schemas = count()

    @asynccontextmanager
    async def schema(self) -> AsyncIterator[str]:
        """A fresh schema's connection string (its tables on the search path); dropped after."""
        name = f"lg_bench_{next(self.schemas)}"
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as admin:
            await admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
            try:
                yield psycopg.conninfo.make_conninfo(self.url, options=f"-c search_path={name}")
            finally:
                drop = sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name))
                await admin.execute(drop)

    async def measure(self, body: SaverRun) -> tuple[float, Stored]:
        async with self.schema() as conninfo:
            async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
                await saver.setup()  # creates the tables; not part of the run
                seconds = await body(saver)
            async with await psycopg.AsyncConnection.connect(conninfo) as conn:
                return seconds, await postgres_stored(conn)


Backend = MemoryBackend | PostgresBackend


@dataclass(frozen=True)
class Row:
    backend: str
    layout: str
    turns: int
    durability: str  # the setting (no effect on lg-off: nothing is saved)
    seconds: float  # the run with the saver (or without one, for lg-off)
    written: int = 0
    final: int = 0
    checkpoints: int = 0
    ms_per_checkpoint: float = 0.0

    @property
    def ratio(self) -> float:
        return self.written / self.final if self.final else 0.0


async def measure_turns(
    backends: Sequence[Backend], turns: int, durability: Durability
) -> AsyncIterator[Row]:
    off = {layout: await run(layout, turns, durability, None) for layout in LAYOUTS}
    for layout, seconds in off.items():
        yield Row("lg-off", layout, turns, durability, seconds)
    for backend in backends:
        final = 0  # the default layout's, the delta row's too (the same state)
        for layout in LAYOUTS:  # default first
            seconds, stored = await backend.measure(partial(run, layout, turns, durability))
            final = final or stored.final
            per = (seconds - off[layout]) / stored.checkpoints * 1000
            yield Row(
                backend.name, layout, turns, durability, seconds, stored.written, final,
                stored.checkpoints, per,
            )  # fmt: skip


async def warm_up() -> None:
    """Both graphs once, so the first measured run pays no first-call costs."""
    for layout in LAYOUTS:
        await run(layout, 3, "sync", None)
        await run(layout, 3, "sync", InMemorySaver())


HEADER = (
    "LangGraph {version}, durability {durability!r}: default = the add_messages channel, delta ="
    "\nDeltaChannel(snapshot_frequency={frequency}). written = every byte the saver stored over the"
    "\nrun: octet_length of every column of every row of checkpoints, checkpoint_blobs and"
    "\ncheckpoint_writes (JSONB as its text, an INTEGER as 4; the in-memory saver's dicts as the"
    "\nsame rows, msgpack where Postgres has JSONB); final = the default-channel run's last"
    "\ncheckpoint, its row and blobs (the delta row uses the same number); ms/ckpt ="
    "\n(run s - lg-off run s) / checkpoints"
)
COLUMNS = (
    f"{'backend':11} {'layout':9} {'written':>12} {'final':>9} {'ratio':>8} "
    f"{'run s':>7} {'ckpts':>6} {'ms/ckpt':>8}"
)


def table_line(row: Row) -> str:
    """A row laid out as ``bench/checkpoint_overhead.py`` lays out oma's."""
    head = f"{row.backend:11} {row.layout:9}"
    if row.backend == "lg-off":
        return f"{head} {0:>12} {'-':>9} {'-':>8} {row.seconds:7.2f}  (baseline)"
    return (
        f"{head} {row.written:>12} {row.final:>9} {row.ratio:>7.1f}x "
        f"{row.seconds:7.2f} {row.checkpoints:>6} {row.ms_per_checkpoint:8.3f}"
    )


def json_line(row: Row) -> str:
    versions = {"langgraph": version("langgraph"), "snapshot_frequency": SNAPSHOT_FREQUENCY}
    return json.dumps({**asdict(row), "ratio": round(row.ratio, 2), **versions})


async def main(turn_counts: Sequence[int], backends: Sequence[Backend], args: Options) -> None:
    await warm_up()
    if not args.json:
        print(
            HEADER.format(
                version=version("langgraph"),
                durability=args.durability,
                frequency=SNAPSHOT_FREQUENCY,
            )
        )
    for turns in turn_counts:
        if not args.json:
            print(f"\n{turns}-turn conversation\n{COLUMNS}")
        async for row in measure_turns(backends, turns, args.durability):
            print(json_line(row) if args.json else table_line(row), flush=True)


@dataclass(frozen=True)
class Options:
    json: bool
    durability: Durability


def parse_args(argv: Sequence[str]) -> tuple[list[int], list[Backend], Options]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="10,300,1000", help="comma-separated turn counts")
    parser.add_argument(
        "--postgres-url", help="a PostgreSQL to run lg-postgres against (without: left out)"
    )
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated, of memory,postgres"
    )
    parser.add_argument(
        "--durability",
        choices=("sync", "async"),
        default="sync",
        help="sync (default): each checkpoint is saved before the next step, as oma's fenced"
        " saves; async: LangGraph's default, saved while the next step runs",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args(argv)
    turns = [int(part) for part in args.turns.split(",") if part.strip()]
    if any(n < 2 for n in turns):
        parser.error("--turns: at least 2 (a tool call, then the answer)")
    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    if set(names) - set(BACKENDS):
        parser.error(f"--backends: choose from {','.join(BACKENDS)}")
    chosen: list[Backend] = []
    if "memory" in names:
        chosen.append(MemoryBackend())
    if "postgres" in names and args.postgres_url:
        chosen.append(PostgresBackend(args.postgres_url))
    return turns, chosen, Options(args.json, args.durability)


if __name__ == "__main__":
    turn_counts, chosen, options = parse_args(sys.argv[1:])
    asyncio.run(main(turn_counts, chosen, options))
