"""``python -m devcluster sandbox``: what runs inside sees its own network, fake kernel
tunables and cgroups; the host sees none of it, before or after (docs/local-cluster.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from devcluster.binaries import find_tool
from devcluster.sandbox import CGROUP_FS, HOST_IP, KERNEL_DEFAULTS, real_node_possible, sandbox_id
from tests.cluster.helpers import pod

pytestmark = [
    pytest.mark.skipif(
        real_node_possible() is not None and os.environ.get("OMA_REQUIRE_CLUSTER") != "1",
        reason=str(real_node_possible()),
    ),
    pytest.mark.skipif(
        sandbox_id() is not None,
        reason="checks the host outside the sandbox: run it outside one (hack/test does)",
    ),
]
HACK = Path(__file__).resolve().parents[2] / "hack"
INSIDE = """
import os, pathlib, subprocess
from devcluster.realnode import make_cgroup_root
ident = os.environ["OMA_DEVCLUSTER_SANDBOX"]
print(make_cgroup_root(ident + "-probe", 1 << 30))
for name in ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"):
    print(name, pathlib.Path("/proc/sys", name).read_text().strip())
print(subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True).stdout)
print("pid", os.getpid())
raise SystemExit(7)
"""


def _sysctls() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text().strip() for name in KERNEL_DEFAULTS}


def test_the_sandbox_changes_nothing_outside_itself() -> None:
    before = _sysctls()
    done = subprocess.run(
        [sys.executable, "-m", "devcluster", "sandbox", "--", sys.executable, "-c", INSIDE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(HACK)},
    )
    assert done.returncode == 7, done.stderr  # the command's exit code
    lines = done.stdout.splitlines()
    cgroup_root = lines[0]
    assert cgroup_root.startswith("/omak-"), done.stdout
    for name, value in KERNEL_DEFAULTS.items():  # what the kubelet checks, faked inside
        assert f"{name} {value}" in lines
    assert f"{HOST_IP}/16" in done.stdout
    assert "eth0" not in done.stdout  # a network namespace of its own
    assert int(lines[-1].split()[1]) < 100  # a pid namespace of its own (host pids are larger)
    # Outside: the host's values, no cgroup left, no address added.
    assert _sysctls() == before
    assert list(CGROUP_FS.glob(f"*{cgroup_root}")) == []
    host_addresses = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True)
    assert HOST_IP not in host_addresses.stdout


@pytest.mark.timeout(240)
def test_local_cluster_up_runs_a_real_node_that_kubectl_on_the_host_reaches(
    tmp_path: Path,
) -> None:
    """`hack/local-cluster up` from the host: a kubelet with containerd in a sandbox, its API
    server forwarded to the host's loopback (the printed kubeconfig works here); with
    `--expose PORT` a pod reaches a server on the host's loopback at HOST_IP:PORT; `down` stops
    it all, and nothing of it is left on the host."""
    kubectl = find_tool("kubectl")
    assert kubectl is not None, "hack/k8s/ensure-binaries builds kubectl"
    env = {**os.environ, "OMA_DEVCLUSTER_DIR": str(tmp_path / "cluster")}
    log = tmp_path / "up.log"
    cgroup_root = ""
    host_server = _host_http_server(b"served on the host's loopback\n")
    port = host_server.server_address[1]
    with log.open("w") as out:
        up = subprocess.Popen(
            [str(HACK / "local-cluster"), "up", "--expose", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "export KUBECONFIG=" not in log.read_text():
            assert up.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        (kubeconfig,) = re.findall(r"export KUBECONFIG=(\S+)", log.read_text())
        nodes = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "wide"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert nodes.returncode == 0, nodes.stderr
        assert re.search(r"devcluster-node +Ready .* containerd://", nodes.stdout), nodes.stdout
        assert "is a kubelet with containerd" in log.read_text()
        config = tmp_path / "cluster" / "nodes" / "devcluster-node" / "kubelet-config.yaml"
        cgroup_root = str(yaml.safe_load(config.read_text())["cgroupRoot"])
        assert list(CGROUP_FS.glob(f"*{cgroup_root}")), "the node's cgroups, while it runs"
        assert f"pods reach the host's 127.0.0.1:{port} at {HOST_IP}:{port}" in log.read_text()
        client = [str(kubectl), f"--kubeconfig={kubeconfig}", "-n", "default"]
        fetch = f"wget -qO- http://{HOST_IP}:{port}/"
        manifest = json.dumps(pod("reach-host", fetch))
        applied = subprocess.run(
            [*client, "apply", "-f", "-"], input=manifest, capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        deadline = time.monotonic() + 90
        while True:
            phase = subprocess.run(
                [*client, "get", "pod", "reach-host", "-o", "jsonpath={.status.phase}"],
                capture_output=True, text=True, timeout=30,
            ).stdout  # fmt: skip
            if phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        logs = subprocess.run(
            [*client, "logs", "reach-host"], capture_output=True, text=True, timeout=30
        )
        assert phase == "Succeeded", (phase, logs.stdout, logs.stderr)
        assert logs.stdout == "served on the host's loopback\n"
        down = subprocess.run(
            [str(HACK / "local-cluster"), "down"], capture_output=True, text=True, env=env,
            timeout=90,
        )  # fmt: skip
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
        assert up.wait(timeout=30) == 0, log.read_text()
    finally:
        if up.poll() is None:  # a failure above: stop it as Ctrl-C does (SIGKILL would leave
            up.terminate()  # the sandbox it started running)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
        host_server.shutdown()
    assert cgroup_root and list(CGROUP_FS.glob(f"*{cgroup_root}")) == [], "cgroups were left"
    host_addresses = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True)
    assert HOST_IP not in host_addresses.stdout


def _host_http_server(body: bytes) -> ThreadingHTTPServer:
    """An HTTP server on the host's loopback (a free port) answering ``body``, in a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_expose_refuses_a_bad_port_and_the_node_agent(tmp_path: Path) -> None:
    env = {**os.environ, "OMA_DEVCLUSTER_DIR": str(tmp_path / "cluster")}
    for args, message in [
        (["--expose", "0"], "'0' is not a port (1-65535)"),
        (["--expose", "6379", "--node-agent"], "--expose is for the real node's pods"),
    ]:
        done = subprocess.run(
            [str(HACK / "local-cluster"), "up", *args], capture_output=True, text=True, env=env,
            timeout=120,
        )  # fmt: skip
        assert done.returncode != 0 and message in done.stderr, done.stderr
    sandboxed = subprocess.run(
        [sys.executable, "-m", "devcluster", "sandbox", "--expose", "x", "--", "true"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(HACK)},
    )  # fmt: skip
    assert sandboxed.returncode == 2 and "--expose needs a port (1-65535)" in sandboxed.stderr
