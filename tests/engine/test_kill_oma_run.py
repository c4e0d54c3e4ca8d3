"""SIGKILL ``oma run`` at random moments, resume each time, and compare with a clean run."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.store import FileStore

SPEC = Path(__file__).with_name("kill_spec.yaml")
MIN_KILLS = 30


def _start(run_id: str, work: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OMA_LEDGER_PATH": str(work / f"{run_id}.ledger.jsonl")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oma",
            "run",
            str(SPEC),
            "--run-id",
            run_id,
            "--store",
            str(work / f"{run_id}.json"),
            "--events",
            str(work / f"{run_id}.events"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _finish(child: subprocess.Popen[bytes]) -> None:
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr.decode()


def _final(run_id: str, work: Path) -> tuple[dict[str, str], Counter[tuple[str, str]]]:
    """Task outputs by title, and ledger entries counted by (task title, tool call id)."""
    snapshot = asyncio.run(
        Checkpoint(FileStore(work / f"{run_id}.json"), run_id=run_id).load_latest()
    )
    assert isinstance(snapshot, CheckpointSnapshotV4)
    titles = {task.id: task.title for task in snapshot.queue.tasks}
    assert all(task.status == "completed" for task in snapshot.queue.tasks)
    outputs = {task.title: task.result or "" for task in snapshot.queue.tasks}
    ledger: Counter[tuple[str, str]] = Counter()
    for line in (work / f"{run_id}.ledger.jsonl").read_text().splitlines():
        run, task_id, call_id = json.loads(line)["key"].split(":")
        assert run == run_id
        ledger[(titles[task_id], call_id)] += 1
    return outputs, ledger


def _check_events(run_id: str, work: Path) -> None:
    """No task starts again once it completed: completed work is never re-run."""
    completed: set[str] = set()
    for line in (work / f"{run_id}.events").read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "task_start":
            assert event["task"] not in completed, f"task {event['task']} re-ran after completing"
        if event["type"] == "task_complete":
            assert event["task"] not in completed
            completed.add(event["task"])


@pytest.mark.crash
@pytest.mark.timeout(900)
def test_random_kills_of_oma_run_change_nothing(tmp_path: Path) -> None:
    baseline = _start("clean", tmp_path)
    _finish(baseline)
    expected_outputs, expected_ledger = _final("clean", tmp_path)
    assert set(expected_ledger.values()) == {1} and len(expected_ledger) == 8

    rng = random.Random(1129)
    kills, rounds = 0, 0
    while kills < MIN_KILLS:
        rounds += 1
        run_id = f"killed-{rounds}"
        while True:
            child = _start(run_id, tmp_path)
            time.sleep(rng.uniform(0.3, 2.5))
            if child.poll() is not None:
                _finish(child)
                break
            child.send_signal(signal.SIGKILL)
            child.wait()
            kills += 1
        outputs, ledger = _final(run_id, tmp_path)
        assert outputs == expected_outputs
        assert ledger == expected_ledger, "an idempotent effect was lost or applied twice"
        _check_events(run_id, tmp_path)
    print(f"\n{kills} kills over {rounds} runs; every run matched the uninterrupted one")
