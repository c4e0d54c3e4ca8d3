"""``python -m devcluster up|down|status``: the local cluster in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from devcluster import sandbox
from devcluster.binaries import build_times, find_tool
from devcluster.cluster import running_cluster
from devcluster.controlplane import ControlPlaneOptions, Ports
from devcluster.errors import DevClusterError
from devcluster.kube import KubeClient
from devcluster.kubeconfig import load_kubeconfig
from devcluster.nodeagent import DEFAULT_MAX_PODS
from devcluster.ports import free_ports

MARKER = ".devcluster"
HOST_PID_ENV = "OMA_DEVCLUSTER_HOST_PID"  # the host's pid of a sandboxed 'up' (for 'down')


def default_workdir() -> Path:
    env = os.environ.get("OMA_DEVCLUSTER_DIR")
    return Path(env) if env else Path.home() / ".cache" / "oma" / "devcluster"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has stopped: its parent (e.g. a test runner) just has not reaped it yet.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return False
    return state != "Z"


def _read_state(workdir: Path) -> dict[str, object] | None:
    state = workdir / "state.json"
    if not state.is_file():
        return None
    data: dict[str, object] = json.loads(state.read_text())
    return data


def _fresh_workdir(workdir: Path) -> None:
    state = _read_state(workdir)
    if state and _pid_alive(int(str(state["pid"]))):
        raise DevClusterError(
            f"a devcluster already runs from {workdir} (pid {state['pid']}); use 'down' first"
        )
    if workdir.exists() and any(workdir.iterdir()) and not (workdir / MARKER).exists():
        raise DevClusterError(f"{workdir} is not empty and is not a devcluster directory")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / MARKER).touch()


async def _up(args: argparse.Namespace) -> int:
    workdir: Path = args.workdir
    if not os.environ.get(HOST_PID_ENV):
        _fresh_workdir(workdir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    options = ControlPlaneOptions(ports=Ports(apiserver=args.port))
    async with running_cluster(
        workdir,
        node_name=args.node_name,
        with_agent=not args.no_agent,
        options=options,
        max_pods=args.max_pods,
        real_node=args.real_node,
    ) as running:
        cp = running.control_plane
        (workdir / "state.json").write_text(
            json.dumps(
                {
                    "pid": int(os.environ.get(HOST_PID_ENV) or os.getpid()),
                    "server": cp.server,
                    "kubeconfig": str(cp.admin_kubeconfig),
                }
            )
        )
        print(
            f"devcluster: up in {running.start_seconds:.1f}s at {cp.server} "
            f"(logs: {workdir / 'logs'})",
            flush=True,
        )
        for node in running.nodes:
            print(
                f"devcluster: node {node.name} is a kubelet with containerd "
                f"(logs: {workdir / 'logs'})",
                flush=True,
            )
        if running.agent is not None:
            print(
                f"devcluster: node {running.agent.name} runs pods as local processes "
                f"under {running.agent.pods_dir}",
                flush=True,
            )
        for port in args.expose:
            print(
                f"devcluster: pods reach the host's 127.0.0.1:{port} at {sandbox.HOST_IP}:{port}",
                flush=True,
            )
        kubectl = find_tool("kubectl")
        if kubectl is not None:
            print(f"devcluster: kubectl is {kubectl}", flush=True)
        print(f"export KUBECONFIG={cp.admin_kubeconfig}", flush=True)
        print("devcluster: Ctrl-C (or 'hack/local-cluster down') stops everything", flush=True)
        await stop.wait()
        print("devcluster: stopping", flush=True)
    (workdir / "state.json").unlink(missing_ok=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    state = _read_state(args.workdir)
    if not state or not _pid_alive(int(str(state["pid"]))):
        print("devcluster: not running")
        return 0
    pid = int(str(state["pid"]))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _pid_alive(pid):
        print(f"devcluster: pid {pid} did not stop within 60s", file=sys.stderr)
        return 1
    print("devcluster: stopped")
    return 0


async def _status(args: argparse.Namespace) -> int:
    state = _read_state(args.workdir)
    if not state or not _pid_alive(int(str(state["pid"]))):
        print("devcluster: not running")
        return 1
    async with KubeClient(load_kubeconfig(Path(str(state["kubeconfig"])))) as client:
        nodes = await client.get("/api/v1/nodes")
        version = await client.get("/version")
    print(
        f"devcluster: running (pid {state['pid']}) at {state['server']}, "
        f"Kubernetes {version.get('gitVersion')}"
    )
    for node in nodes["items"]:
        ready = next(
            (c["status"] for c in node["status"].get("conditions") or [] if c["type"] == "Ready"),
            "Unknown",
        )
        print(f"  node {node['metadata']['name']}: Ready={ready}")
    print(f"export KUBECONFIG={state['kubeconfig']}")
    return 0


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return int(text)


def _choose_node(args: argparse.Namespace) -> None:
    if args.node_agent or args.no_agent:
        if args.expose:
            raise DevClusterError(
                "--expose is for the real node's pods: the node agent's pods are processes on "
                "the host and reach its loopback already"
            )
        args.real_node = False
        return
    why_not = sandbox.real_node_possible()
    if why_not is None:
        args.real_node = True
    elif args.real_node:
        raise DevClusterError(why_not)
    else:
        print(f"devcluster: no real node here ({why_not}): the node agent runs pods", flush=True)


def _up_in_sandbox(argv: list[str], args: argparse.Namespace) -> int:
    """Run ``up`` again inside a sandbox, its API server's port forwarded to the host's loopback
    (the same port, so the kubeconfig it writes works on both sides)."""
    _fresh_workdir(args.workdir)  # here, where 'down' and 'status' see the same pids
    os.environ[HOST_PID_ENV] = str(os.getpid())  # what 'down' signals: it stops the sandbox
    port = args.port or free_ports(1)[0]
    inner = [sys.executable, "-m", "devcluster", *argv, "--real-node", "--port", str(port)]
    exposed = [arg for host_port in args.expose for arg in ("--expose", str(host_port))]
    return sandbox.main(["--forward", str(port), *exposed, "--", *inner])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sandbox"]:  # everything after it is the command to run inside
        return sandbox.main(argv[1:])
    parser = argparse.ArgumentParser(prog="devcluster", description=__doc__)
    parser.add_argument("--workdir", type=Path, default=default_workdir())
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start control plane + node agent in the foreground")
    up.add_argument("--port", type=int, default=0, help="kube-apiserver port (default: free)")
    up.add_argument("--node-name", default="devcluster-node")
    up.add_argument("--no-agent", action="store_true", help="control plane only")
    kind = up.add_mutually_exclusive_group()
    kind.add_argument(
        "--real-node",
        action="store_true",
        help="a real kubelet + containerd (in a sandbox of its own, the API server forwarded "
        "to the host's loopback); the default where one is possible",
    )
    kind.add_argument(
        "--node-agent",
        action="store_true",
        help="the node agent (pods as local processes): the fallback without containerd",
    )
    up.add_argument(
        "--expose",
        type=_port,
        action="append",
        default=[],
        metavar="PORT",
        help=f"let the real node's pods reach a server on the host's 127.0.0.1:PORT at "
        f"{sandbox.HOST_IP}:PORT (repeatable), e.g. a Redis the walk-through starts",
    )
    up.add_argument(
        "--max-pods",
        type=int,
        default=DEFAULT_MAX_PODS,
        help=f"pods the node runs at once; more stay Pending (default {DEFAULT_MAX_PODS}, "
        "as the kubelet's --max-pods)",
    )
    sub.add_parser("down", help="stop a cluster started with 'up'")
    sub.add_parser("status", help="show whether a cluster runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        if args.command == "up":
            _choose_node(args)
            if args.real_node and sandbox.sandbox_id() is None:
                return _up_in_sandbox(argv, args)
            times = build_times()
            if times:
                print(f"devcluster: binaries built (cold) {times}", flush=True)
            return asyncio.run(_up(args))
        if args.command == "down":
            return _down(args)
        return asyncio.run(_status(args))
    except DevClusterError as exc:
        print(f"devcluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
