"""Private pid, network and mount namespaces for a cluster with a real kubelet and containerd.

``python -m devcluster sandbox -- COMMAND...`` runs COMMAND inside new namespaces and returns
its exit code. A real node changes things a kubelet and containerd take as theirs: bridges,
iptables rules, mounts, ``/proc/sys`` values, ``/var/lib/cni``, ``/run/containerd``. Inside
the namespaces all of that is private, and it all ends with them: when COMMAND exits (or this
process is killed) the kernel kills every process of the pid namespace, the network and mount
namespaces go with their last process, and the cgroups made for the nodes are removed here
afterwards. Nothing on the host is changed (see docs/local-cluster.md, "The real node").

Inside, a veth pair carries ``HOST_IP`` (the address stores and the API server listen on, as
pods reach them); the three kernel tunables a kubelet insists on are faked by bind mounts
(``protectKernelDefaults``: it reads them and never writes); and the sandbox's first process
is an init that reaps orphans (containerd's shims re-parent to it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from devcluster.errors import DevClusterError
from devcluster.forward import expose_to, forward_into

HOST_IP = "10.200.0.1"
HOST_PREFIX = 16
HOST_LINK = "omak0"
ENV_ID = "OMA_DEVCLUSTER_SANDBOX"
ENV_DIR = "OMA_DEVCLUSTER_SANDBOX_DIR"
ENV_HOST_IP = "OMA_DEVCLUSTER_HOST_IP"  # servers the tests start listen there too
CGROUP_FS = Path("/sys/fs/cgroup")
# What the kubelet expects of these and would otherwise write VM-wide.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}
# Paths containerd, libcni and the kubelet use without a setting to move them.
PRIVATE_PATHS = ("/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/containerd")
NEEDED_TOOLS = ("unshare", "ip", "iptables", "mount", "containerd", "ctr", "runc")


def sandbox_id() -> str | None:
    """The id of the sandbox this process runs in, or None outside one."""
    return os.environ.get(ENV_ID) or None


def sandbox_dir() -> Path:
    """The sandbox's private state directory (node state, logs, fake sysctls)."""
    value = os.environ.get(ENV_DIR)
    if not value:
        raise DevClusterError(
            "not inside a devcluster sandbox: run the command under "
            "'python -m devcluster sandbox -- ...' (hack/local-cluster and hack/test do)"
        )
    return Path(value)


def missing_tools() -> list[str]:
    """Host commands a real node needs that this machine lacks (empty: it can run one)."""
    return [tool for tool in NEEDED_TOOLS if shutil.which(tool) is None]


def real_node_possible() -> str | None:
    """None when this machine can run a real node, else why not (for a clear skip or error)."""
    if os.geteuid() != 0:
        return "a real node needs root (namespaces, mounts and cgroups of its own)"
    missing = missing_tools()
    if missing:
        return (
            f"a real node needs {', '.join(missing)} "
            "(Debian packages containerd, runc, iproute2, iptables, util-linux)"
        )
    return None


def cgroup_parent(controller: str) -> Path:
    """Where this process sits in one cgroup v1 hierarchy (node cgroups go below it)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return CGROUP_FS / controller / path.lstrip("/")
    return CGROUP_FS / controller


def cgroup_controllers() -> list[str]:
    """The mounted v1 hierarchies a kubelet uses (each gets a node's cgroup root)."""
    wanted = (
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "pids",
        "devices",
        "freezer",
        "blkio",
        "systemd",
    )
    return [c for c in wanted if (CGROUP_FS / c).is_dir()]


def remove_cgroups(tag: str, timeout: float = 15.0) -> list[Path]:
    """Remove every cgroup named ``*tag*`` made for this sandbox (also those runc made in the
    v2 hierarchy beside the v1 ones); return what could not go."""
    leftovers: list[Path] = []
    for controller in [*cgroup_controllers(), "unified"]:
        for root in {cgroup_parent(controller), CGROUP_FS / controller}:
            for top in root.glob(f"*{tag}*"):
                deepest_first = sorted(
                    (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
                )
                for path in [*deepest_first, top]:
                    deadline = time.monotonic() + timeout
                    while path.exists():
                        try:
                            path.rmdir()
                        except OSError:  # a dying task still counted in it
                            if time.monotonic() > deadline:
                                leftovers.append(path)
                                break
                            time.sleep(0.1)
    return leftovers


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise DevClusterError(f"sandbox setup: {' '.join(argv)} failed: {done.stderr.strip()}")


def _set_up_inside(state: Path) -> None:
    """Runs as the first process of the new namespaces, before COMMAND."""
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", f"{HOST_LINK}p")
    _run("ip", "addr", "add", f"{HOST_IP}/{HOST_PREFIX}", "dev", HOST_LINK)
    _run("ip", "link", "set", HOST_LINK, "up")
    _run("ip", "link", "set", f"{HOST_LINK}p", "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")  # this network namespace's own
    fakes = state / "sysctl"
    fakes.mkdir(parents=True, exist_ok=True)
    for name, value in KERNEL_DEFAULTS.items():
        fake = fakes / name.replace("/", ".")
        fake.write_text(value + "\n")
        _run("mount", "--bind", "-o", "ro", str(fake), f"/proc/sys/{name}")
    for path in PRIVATE_PATHS:
        private = state / "paths" / path.strip("/").replace("/", "-")
        private.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir(parents=True, exist_ok=True)
        _run("mount", "--bind", str(private), path)


def _init(argv: list[str]) -> int:
    """PID 1 of the sandbox: start COMMAND, pass on signals, reap everything, return its code."""
    child = subprocess.Popen(argv)

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    code: int | None = None
    while code is None:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            child.returncode = code
    return code if code is not None else 1
    # Returning ends PID 1: the kernel SIGKILLs every process left in the namespace.


def _inside(argv: list[str]) -> int:
    state = sandbox_dir()
    _set_up_inside(state)
    code = _init(argv)
    return 128 - code if code < 0 else code


def _outside(
    argv: list[str], forward_port: int | None = None, expose_ports: tuple[int, ...] = ()
) -> int:
    reason = real_node_possible()
    if reason is not None:
        print(f"devcluster sandbox: {reason}", file=sys.stderr)
        return 2
    ident = f"omak-{uuid.uuid4().hex[:8]}"
    state = Path(tempfile.mkdtemp(prefix=f"{ident}-"))
    env = {**os.environ, ENV_ID: ident, ENV_DIR: str(state), ENV_HOST_IP: HOST_IP}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH")) if p
    )
    unshare = [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--net",
        "--mount",
        "--propagation",
        "private",
    ]
    inner = [sys.executable, "-m", "devcluster", "sandbox", "--inside", "--", *argv]
    proc = subprocess.Popen([*unshare, *inner], env=env)
    listeners = [forward_into(proc.pid, forward_port)] if forward_port else []
    try:
        listeners += [expose_to(proc.pid, HOST_IP, port) for port in expose_ports]
    except OSError as exc:
        print(f"devcluster sandbox: cannot expose a host port: {exc}", file=sys.stderr)
        proc.kill()

    def forward(signum: int, _frame: object) -> None:
        # unshare does not pass signals on: the sandbox's init (its child) does, to COMMAND.
        if proc.poll() is None:
            for child in _children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        code = proc.wait()
    finally:
        for listener in listeners:
            listener.close()
        left = remove_cgroups(ident)
        if left:
            print(f"devcluster sandbox: could not remove cgroups {left}", file=sys.stderr)
        if not os.environ.get("OMA_DEVCLUSTER_KEEP"):
            shutil.rmtree(state, ignore_errors=True)
    return code


def _children(pid: int) -> list[int]:
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in listed.split()]


USAGE = (
    "usage: python -m devcluster sandbox [--forward PORT] [--expose PORT]... -- COMMAND [ARGS...]"
)


def main(args: list[str]) -> int:
    """``--forward PORT``: host 127.0.0.1:PORT leads to 127.0.0.1:PORT inside (the API server).
    ``--expose PORT`` (repeatable): inside, HOST_IP:PORT leads to the host's 127.0.0.1:PORT (a
    server on the host that pods use)."""
    inside = bool(args) and args[0] == "--inside"
    if inside:
        args = args[1:]
    forward: int | None = None
    exposed: list[int] = []
    while args[:1] in (["--forward"], ["--expose"]):
        flag = args[0]
        if len(args) < 2 or not args[1].isdigit() or not 0 < int(args[1]) < 65536:
            print(f"devcluster sandbox: {flag} needs a port (1-65535)", file=sys.stderr)
            return 2
        if flag == "--forward":
            forward = int(args[1])
        else:
            exposed.append(int(args[1]))
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    return _inside(args) if inside else _outside(args, forward, tuple(exposed))
