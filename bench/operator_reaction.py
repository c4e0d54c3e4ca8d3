"""Operator reaction: from an Eviction API request to the next attempt's pod and model call.

    .venv/bin/python bench/operator_reaction.py [--quick] [--evictions N] [--delay S]

One long TeamRun runs on the local control plane with the operator as a child process; its
scripted model answers every turn at once with two tool calls, the built-in ``ledger_append``
(its ledger file is on this machine) and a ``wait`` of ``--delay`` s (the turn's work). Each
time the current attempt's runner has made its first model call, the benchmark evicts its pod
through the Eviction API (policy/v1, at a random moment within a turn) and measures, from
the eviction request (all clocks: this process, monotonic):

- drain: until the evicted pod's container reads terminated (the runner drains on SIGTERM:
  it lets the in-flight tool calls finish, commits, flushes the checkpoint and exits 11);
- new pod: until the next attempt's pod object exists (the watch event arrives);
- operator part: new pod minus drain (the operator seeing the end, recording the outcome,
  creating the pod);
- first model call: until the next attempt's first new ledger line (written a few ms after that
  call answers; the tool is idempotent, so calls replayed from the checkpoint add no line);
  "running" is the new pod reading Running.

Prints p50/p99/max of each and the count, plus the operator's API requests per eviction
(from the API server's audit log, the operator authenticating as its own user).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from operatorlib import (
    JSON,
    OPERATOR_USER,
    Stack,
    audit_counts,
    audit_events,
    for_pods,
    header,
    in_sandbox_or_reexec,
    percentile,
    proc_stats,
    stack,
    stats_row,
    teamrun,
    wait_for,
    watch_forever,
)

from devcluster.images import BUSYBOX_IMAGE

NAME = "reaction"
TARGET_P99 = 2.0


@dataclass
class PodTimes:
    added: float = 0.0
    running: float = 0.0
    terminated: float = 0.0
    exit_code: int | None = None


@dataclass
class Observed:
    pods: dict[str, PodTimes] = field(default_factory=dict)
    ledger: list[tuple[float, str]] = field(default_factory=list)  # (seen at, key)

    def on_pod(self, kind: str, pod: JSON) -> None:
        at = time.monotonic()
        name = pod["metadata"]["name"]
        times = self.pods.setdefault(name, PodTimes(added=at))
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and not times.running:
            times.running = at
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and not times.terminated:
                times.terminated = at
                times.exit_code = terminated.get("exitCode")

    def first_line_after(self, moment: float) -> float | None:
        return next((at for at, _ in self.ledger if at > moment), None)


def poll_ledger(path: Path, observed: Observed, stop: threading.Event) -> None:
    """Note when each ledger line appears (appended and fsynced per line); runs in a thread."""
    offset = 0
    pending = b""
    while not stop.wait(0.005):
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        if size > offset:
            at = time.monotonic()
            with path.open("rb") as ledger:
                ledger.seek(offset)
                chunk = ledger.read(size - offset)
            offset = size
            pending += chunk
            *lines, pending = pending.split(b"\n")
            observed.ledger.extend((at, line.decode()[:80]) for line in lines if line.strip())


def poll_redis_ledger(url: str, key: str, observed: Observed, stop: threading.Event) -> None:
    """The same for a ledger in a Redis list (a real node's pods cannot write our files)."""
    client = redis.Redis.from_url(url)
    seen = 0
    try:
        while not stop.wait(0.005):
            length = int(client.llen(key))
            if length > seen:
                at = time.monotonic()
                lines = client.lrange(key, seen, length - 1)
                seen = length
                observed.ledger.extend((at, bytes(line).decode()[:80]) for line in lines)
    finally:
        client.close()


def script(turns: int, delay: float) -> list[dict[str, Any]]:
    """Each turn: the model answers at once with two calls, ``ledger_append`` (the marker: its
    line lands a few ms after the model call) and ``wait`` (the turn's work, ``delay`` s)."""
    steps: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": f"c{i}", "name": "ledger_append", "input": {"entry": f"turn {i}"}},
                {"id": f"w{i}", "name": "wait", "input": {"seconds": delay}},
            ],
        }
        for i in range(turns)
    ]
    return [*steps, {"text": "done"}]


async def evict(s: Stack, pod: str) -> int:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": s.namespace},
    }
    await s.kube.create(f"/api/v1/namespaces/{s.namespace}/pods/{pod}/eviction", body)
    return 201


async def bare_pods(s: Stack, observed: Observed, count: int) -> list[float]:
    """The baseline, measured here first: a busybox pod's creation to Running on the same
    node, ``count`` times (what the kubelet and containerd take, with no operator involved)."""
    pods = f"/api/v1/namespaces/{s.namespace}/pods"
    seconds = []
    for index in range(count):
        name = f"bare-{index}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "image": BUSYBOX_IMAGE, "command": ["sleep", "30"]}],
                "terminationGracePeriodSeconds": 0,
            },
        }
        t0 = time.monotonic()
        await s.kube.create(pods, body)

        async def running(name: str = name) -> float | None:
            times = observed.pods.get(name)
            return times.running if times is not None and times.running else None

        seconds.append(await wait_for(running, 60, f"pod {name} Running", 0.01) - t0)
        await s.kube.delete(f"{pods}/{name}")
    return seconds


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    evictions: int = args.evictions
    delay: float = args.delay
    ledger = workdir / "ledger.jsonl"
    observed = Observed()
    async with stack(workdir, real_node=args.real_node) as s:
        tasks = [
            asyncio.create_task(
                watch_forever(s.kube, f"/api/v1/namespaces/{s.namespace}/pods", observed.on_pod)
            ),
        ]
        stop = threading.Event()
        ledger_env = {"OMA_LEDGER_PATH": str(ledger)}
        poll: tuple[Any, ...] = (poll_ledger, (ledger, observed, stop))
        if args.real_node:
            key = f"bench-ledger-{s.namespace}"
            ledger_env = {"OMA_LEDGER_URL": for_pods(s.redis.url), "OMA_LEDGER_KEY": key}
            poll = (poll_redis_ledger, (s.redis.url, key, observed, stop))
        poller = threading.Thread(target=poll[0], args=poll[1], daemon=True)
        poller.start()
        baseline = await bare_pods(s, observed, args.baseline) if args.real_node else []
        try:
            turns = evictions * 4 + 20
            body = teamrun(
                NAME,
                script(turns, delay),
                tools=["ledger_append", "wait"],
                env=ledger_env,
                retry={"maxDisruptions": evictions + 10},
                max_turns=turns + 5,
            )
            await s.kube.create(s.teamruns(), body)
            rows: list[dict[str, float]] = []
            offset = 0
            for attempt in range(1, evictions + 1):
                pod = f"{NAME}-a{attempt}"

                async def started(pod: str = pod) -> float | None:
                    times = observed.pods.get(pod)
                    if times is None or not times.running:
                        return None
                    return observed.first_line_after(times.added)

                await wait_for(started, 120, f"pod {pod} to make its first model call", 0.01)
                if attempt == 1:
                    offset = s.audit_offset()
                    cpu_before = proc_stats(s.operator.pid)
                await asyncio.sleep(random.uniform(0.0, delay))  # somewhere within a turn
                t0 = time.monotonic()
                await evict(s, pod)
                following = f"{NAME}-a{attempt + 1}"

                async def resumed(following: str = following) -> float | None:
                    times = observed.pods.get(following)
                    if times is None or not times.running:
                        return None
                    return observed.first_line_after(times.added)

                line = await wait_for(resumed, 120, f"pod {following}'s first model call", 0.01)
                old, new = observed.pods[pod], observed.pods[following]
                rows.append(
                    {
                        "drain": old.terminated - t0,
                        "new_pod": new.added - t0,
                        "operator": new.added - old.terminated,
                        "running": new.running - t0,
                        "first_call": line - t0,
                        "exit": float(old.exit_code if old.exit_code is not None else -1),
                    }
                )
                print(
                    f"# eviction {attempt}: drain {rows[-1]['drain']:.3f}s, new pod "
                    f"{rows[-1]['new_pod']:.3f}s, first model call {rows[-1]['first_call']:.3f}s"
                    f" (exit {old.exit_code})",
                    flush=True,
                )
                if args.verbose:
                    for at, key in observed.ledger:
                        if at > t0 - 2 * delay:
                            print(f"#   ledger +{at - t0:.3f}s {key}")
                    for name in (pod, following):
                        times = observed.pods[name]
                        print(
                            f"#   {name}: added +{times.added - t0:.3f} running "
                            f"+{times.running - t0:.3f} terminated +{times.terminated - t0:.3f}"
                        )
            cpu_after = proc_stats(s.operator.pid)
            status = (await s.kube.get(f"{s.teamruns()}/{NAME}")).get("status") or {}
            events = audit_events(s.audit_log, offset)
            requests = audit_counts(events, OPERATOR_USER)
        finally:
            stop.set()
            poller.join(5)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    report(args, rows, status, requests, cpu_before, cpu_after, baseline)


def report(
    args: argparse.Namespace,
    rows: list[dict[str, float]],
    status: JSON,
    requests: Counter[str],
    cpu_before: Any,
    cpu_after: Any,
    baseline: list[float],
) -> None:
    """The results as markdown (docs/performance.md pastes this part of the output as is)."""
    n = len(rows)
    print()
    print(f"### {n} evictions (Eviction API), turns of {args.delay} s")
    print()
    print("| from the eviction request to | count | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    print(stats_row("old runner terminated (drain)", [r["drain"] for r in rows]))
    print(stats_row("**next attempt's pod created**", [r["new_pod"] for r in rows]))
    print(stats_row("(pod created − drain: the operator's part)", [r["operator"] for r in rows]))
    print(stats_row("next pod Running", [r["running"] for r in rows]))
    print(stats_row("**next runner's first model call**", [r["first_call"] for r in rows]))
    if baseline:
        print(stats_row("(baseline: a bare pod created → Running)", baseline))
    print()
    if baseline and n:
        ratio = percentile([r["running"] for r in rows], 0.5) / percentile(baseline, 0.5)
        print(f"- eviction → next pod Running, p50: **{ratio:.1f}x** a bare pod's start here")
    if n:
        p99 = percentile([r["new_pod"] for r in rows], 0.99)
        verdict = "met" if p99 < TARGET_P99 else "MISSED"
        print(f"- target: eviction → new pod p99 < {TARGET_P99:.0f} s: **{verdict}** ({p99:.3f} s)")
    exits = Counter(int(r["exit"]) for r in rows)
    outcomes = Counter(a.get("outcome") for a in status.get("attempts") or [])
    print(f"- evicted runners' exit codes: {dict(exits)} (11 = drained after SIGTERM)")
    print(
        f"- TeamRun: attempt {status.get('attempt')}, disruptions {status.get('disruptions')}, "
        f"outcomes {dict(outcomes)}"
    )
    if cpu_before is not None and cpu_after is not None and n:
        cpu = cpu_after.cpu_seconds - cpu_before.cpu_seconds
        print(
            f"- operator: {cpu:.2f} CPU s over the evictions ({cpu / n * 1000:.0f} ms each), "
            f"peak RSS {cpu_after.peak_rss_mib:.0f} MiB (VmHWM)"
        )
    if n:
        total = sum(requests.values())
        print(f"- operator API requests: {total}, **{total / n:.1f} per eviction**")
        print()
        print("| verb resource | per eviction | total |")
        print("|---|---|---|")
        for key, count in requests.most_common():
            print(f"| {key} | {count / n:.2f} | {count} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 evictions (smoke run)")
    parser.add_argument("--evictions", type=int, default=None, help="default 30 (quick: 5)")
    parser.add_argument("--delay", type=float, default=0.5, help="each turn's wait, s")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--verbose", action="store_true", help="print each eviction's timeline")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="pods as containers under a kubelet + containerd (inside devcluster's sandbox)",
    )
    parser.add_argument("--baseline", type=int, default=10, help="bare pods timed (real node)")
    args = parser.parse_args()
    in_sandbox_or_reexec(args.real_node)
    if args.evictions is None:
        args.evictions = 5 if args.quick else 30
    random.seed(args.seed)
    print(header("Operator reaction to evictions", args.quick), flush=True)
    if args.workdir is not None:  # kept afterwards: operator log, audit log, ledger
        args.workdir.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.workdir))
        return
    with tempfile.TemporaryDirectory(prefix="oma-bench-reaction-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
