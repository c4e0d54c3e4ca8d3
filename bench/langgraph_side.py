"""LangGraph's side of ``bench/checkpoint_overhead.py --langgraph``: its venv, made on first use
from ``bench/langgraph/requirements.txt``, and the rows of ``bench/langgraph/amplification.py``
run in it as a child process, printed under oma's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parent.parent
ServerUrls = dict[str, str]  # "redis", "postgres": the servers started, for other clients
LANGGRAPH = ROOT / "bench" / "langgraph"
LANGGRAPH_BACKENDS = ("memory", "postgres")  # the stores LangGraph's side runs on


@dataclass(frozen=True)
class LangGraphSide:
    python: Path  # of the LangGraph venv
    backends: tuple[str, ...]
    postgres_url: str | None  # the PostgreSQL oma's rows use


def langgraph_venv() -> Path:
    """One venv per content of the requirements file: a changed pin makes a new one."""
    pins = (LANGGRAPH / "requirements.txt").read_bytes()
    name = f"langgraph-{hashlib.sha256(pins).hexdigest()[:12]}"
    return Path.home() / ".cache" / "oma" / "bench-venvs" / name


def ensure_langgraph_venv() -> Path:
    """The LangGraph venv's python, the venv made first if it is not there (pip: network)."""
    venv = langgraph_venv()
    python, done = venv / "bin" / "python", venv / ".installed"
    if done.exists():
        print(f"# LangGraph venv: reusing {venv}", flush=True)
        return python
    # No marker: never made, or an install that failed half-way; made again from scratch.
    print(f"# LangGraph venv: creating {venv} (python -m venv, pip install -r)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    install = ["-m", "pip", "install", "--quiet", "-r", str(LANGGRAPH / "requirements.txt")]
    # pip's output on stderr: stdout is the benchmark's table.
    subprocess.run([str(python), *install], check=True, stdout=sys.stderr)
    done.write_text("pip install -r bench/langgraph/requirements.txt succeeded\n")
    print(f"# LangGraph venv: ready, {venv}", flush=True)
    return python


def langgraph_side(
    python: Path | None, names: tuple[str, ...], urls: ServerUrls
) -> LangGraphSide | None:
    if python is None:
        return None
    wanted = [name for name in LANGGRAPH_BACKENDS if not names or name in names]
    postgres_url = urls.get("postgres") if "postgres" in wanted else None
    chosen = tuple(name for name in wanted if name == "memory" or postgres_url)
    return LangGraphSide(python, chosen, postgres_url) if chosen else None


async def print_langgraph(side: LangGraphSide, turns: int) -> None:
    """LangGraph's rows for ``turns``, from its script in its venv, as they come."""
    header = False
    async for row in langgraph_rows(side, turns):
        if not header:
            print(textwrap.fill(LANGGRAPH_HEADER.format(**row), width=92))
            header = True
        print(langgraph_line(row), flush=True)


LANGGRAPH_HEADER = (
    "LangGraph {langgraph} (bench/langgraph/amplification.py, in its own venv), durability"
    " {durability!r} (each checkpoint saved before the next step): default = the add_messages"
    " channel (the whole message list at every checkpoint); delta ="
    " DeltaChannel(snapshot_frequency={snapshot_frequency}) (the new messages, and the whole"
    " list at every {snapshot_frequency}th update); written = octet_length of every column of"
    " every row the saver stored (JSONB as text; the in-memory saver's dicts as the same rows);"
    " final = the default run's last checkpoint (row and blobs); bound. = checkpoints;"
    " ms/bound = (run s - lg-off run s) / checkpoints"
)


def langgraph_line(row: dict[str, Any]) -> str:
    head = f"{row['backend']:11} {row['layout']:9}"
    if row["backend"] == "lg-off":
        return f"{head} {0:>12} {'-':>9} {'-':>8} {row['seconds']:7.2f}  (baseline)"
    return (
        f"{head} {row['written']:>12} {row['final']:>9} {row['ratio']:>7.1f}x "
        f"{row['seconds']:7.2f} {row['checkpoints']:>6} {row['ms_per_checkpoint']:8.3f}"
    )


async def langgraph_rows(side: LangGraphSide, turns: int) -> AsyncIterator[dict[str, Any]]:
    """The script's JSON rows; the child is killed if this stops early (an error, Ctrl-C)."""
    argv = [str(LANGGRAPH / "amplification.py"), "--json", "--turns", str(turns)]
    argv += ["--durability", "sync", "--backends", ",".join(side.backends)]
    if side.postgres_url:
        argv += ["--postgres-url", side.postgres_url]
    child = await asyncio.create_subprocess_exec(
        str(side.python), *argv, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    try:
        async for line in child.stdout:
            yield json.loads(line)
        if await child.wait() != 0:
            raise SystemExit(f"bench/langgraph/amplification.py exited with {child.returncode}")
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def redis_note(url: str | None) -> str:
    """Why there is no lg-redis row: langgraph-checkpoint-redis needs two Redis modules."""
    if url is None:
        return "lg-redis: left out, no redis-server here"
    client = Redis.from_url(url)
    try:
        loaded = sorted(str(module[b"name"], "utf-8") for module in await client.module_list())
    finally:
        await client.aclose()
    return (
        "lg-redis: left out; langgraph-checkpoint-redis needs the RedisJSON and RediSearch"
        f" modules,\nand this redis-server loads {', '.join(loaded) or 'no module'} (MODULE LIST)"
    )
