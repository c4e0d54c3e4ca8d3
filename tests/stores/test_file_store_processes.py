"""FileStore across processes: compare-and-set is atomic and no writer loses another's keys."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from oma.store import FileStore

WORKER = textwrap.dedent("""
    import asyncio, sys
    from oma.store import FileStore

    async def main(path: str, name: str, rounds: int) -> None:
        store = FileStore(path)
        for i in range(rounds):
            await store.set(f"{name}-{i}", str(i))
            while True:  # a shared counter, incremented only through compare-and-set
                entry = await store.get("counter")
                current = entry.value if entry else None
                if await store.compare_and_set("counter", current, str(int(current or 0) + 1)):
                    break

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
""")


def test_concurrent_processes_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    workers = [
        subprocess.Popen([sys.executable, str(script), str(path), f"w{n}", "25"]) for n in range(4)
    ]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0, 0]

    async def check() -> None:
        entries = {entry.key: entry.value for entry in await FileStore(path).list()}
        assert entries["counter"] == "100"
        assert sorted(k for k in entries if k != "counter") == sorted(
            f"w{n}-{i}" for n in range(4) for i in range(25)
        )

    asyncio.run(check())


async def test_a_reader_sees_another_instances_writes(tmp_path: Path) -> None:
    writer, reader = FileStore(tmp_path / "s.json"), FileStore(tmp_path / "s.json")
    await writer.set("a", "1")
    assert (await reader.get("a")) is not None
    await writer.set("a", "2")
    entry = await reader.get("a")
    assert entry is not None and entry.value == "2"
    assert await reader.compare_and_set("a", "1", "x") is False  # sees "2", not its old view
    assert await reader.compare_and_set("a", "2", "3") is True
