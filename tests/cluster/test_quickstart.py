"""docs/quickstart.md, section 2 ("On a local Kubernetes control plane"), run as written: the
doc's ```bash blocks in the doc's order, in two terminals of a user (``tests/quickstart_doc.py``),
from the repository, with a real node; then what the doc says is checked, everything is stopped
the doc's way, and nothing it started may outlive the test.

The user is fresh: ``HOME`` is the test's temp directory (so ``~/.cache/oma/devcluster``, the
doc's KUBECONFIG path, and helm's and kubectl's files are private; ``OMA_K8S_CACHE`` keeps the
binaries' cache), ``PATH`` lacks the venv and the cluster binaries (the doc's ``export PATH``
lines must provide them), and no ``OMA_*``, ``KUBECONFIG`` or ``PYTHONPATH`` is set. Inside
hack/test's real-node step this runs in that step's sandbox, whose network namespace plays the
host: ``hack/local-cluster up`` makes a sandbox of its own there, exactly as on a host, and port
6379 is the sandbox's own.

What the test does instead of the doc, each for a stated reason:
- ``hack/build-image`` ("once") is not run: the sandbox has no network for its ``pip download``
  and hack/test built ``localhost/oma:dev`` just before (107 s warm, ~2 GB of vfs build stages);
  the test requires that image instead.
- ``hack/local-cluster up`` (foreground) runs in the background until its ``export
  KUBECONFIG=...`` line, as in a terminal of its own; Ctrl-C there is SIGINT to its process group.
- Redis's fixed directory ``/tmp/oma-redis`` becomes one in the test's temp directory, so a
  user's files are never touched (and a leftover server is found by that path).
- ``kubectl -n oma get teamruns -w`` becomes waiting for the run's phase ``Succeeded``, then the
  same command without ``-w`` (compared with the doc's table); before ``kubectl -n oma get
  teamrun demo2`` the test waits for ``Succeeded`` as a user would, running it again.
- ``sleep 4`` before deleting the pod becomes waiting until the runner pod runs and the run's
  first checkpoint is in the store (the doc's own ``oma checkpoint show`` answers): "delete its
  pod while it runs", awaited instead of guessed.
- "then stop Redis" is ``kill %1`` in the second terminal (SIGTERM to the job's process group).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devcluster import sandbox
from devcluster.binaries import CONTROL_PLANE_BINARIES, bin_dir, find_binary, find_tool
from devcluster.errors import MissingBinaryError
from tests.cluster.e2e_env import EXISTING, REAL_NODE_IMAGE
from tests.quickstart_doc import (
    REPO,
    Terminal,
    bash_blocks,
    leftovers,
    output_blocks,
    section,
    user_environment,
    wait_until_clean,
    without_comment,
)

pytestmark = pytest.mark.cluster
REDIS_PORT = 6379  # the doc's Redis, exposed to the pods with 'up --expose 6379'
DOC_REDIS_DIR = "/tmp/oma-redis"


def _unavailable(why: str) -> None:
    if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def _port_taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@pytest.fixture
def preconditions() -> None:
    if EXISTING:
        pytest.skip("the quickstart starts its own local control plane (hack/local-cluster up)")
    why_not = sandbox.real_node_possible()
    if why_not is not None:
        _unavailable(f"the quickstart's section 2 runs a real node: {why_not}")
    try:
        for name in (*CONTROL_PLANE_BINARIES, "kubelet", "kube-scheduler"):
            find_binary(name)
    except MissingBinaryError as exc:
        _unavailable(str(exc))
    missing = [name for name in ("kubectl", "helm") if find_tool(name) is None]
    missing += [name for name in ("redis-server", "podman") if shutil.which(name) is None]
    if missing:
        _unavailable(f"the quickstart needs {', '.join(missing)}")
    if not (REPO / ".venv" / "bin" / "oma").exists():
        _unavailable(f"{REPO}/.venv with oma installed (the quickstart's section 1; hack/test)")
    podman = ["podman", "--storage-driver", "vfs", "image", "exists", REAL_NODE_IMAGE]
    if subprocess.run(podman, check=False).returncode != 0:
        _unavailable(f"{REAL_NODE_IMAGE} is not in podman's storage: run hack/build-image")
    if _port_taken(REDIS_PORT):
        _unavailable(
            f"127.0.0.1:{REDIS_PORT} is taken here, and the quickstart's Redis uses it: stop "
            "that server, or run the test in hack/test's real-node step (a network of its own: "
            "PYTHONPATH=hack python -m devcluster sandbox -- python -m pytest ...)"
        )


def _listening_on(marker: Path) -> list[tuple[str, str]]:
    """(process, local address) of each TCP socket listening in this network namespace that
    belongs to a process naming ``marker`` (what the quickstart started), and any on the Redis
    port (redis-server writes its process title over its command line and environment, so it
    names nothing; the test checked the port was free before the doc's Redis started)."""
    listening: dict[str, str] = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            if family == socket.AF_INET6:  # four host-order 32-bit words
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
            else:
                raw = raw[::-1]
            listening[fields[9]] = f"{socket.inet_ntop(family, raw)}:{int(port, 16)}"
    found = [
        ("listening on the Redis port", address)
        for address in listening.values()
        if address.endswith(f":{REDIS_PORT}")
    ]
    for pid in leftovers(marker):
        number = pid.split(":", 1)[0]
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{number}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    inode = target[len("socket:[") : -1] if target.startswith("socket:") else ""
                    if inode in listening:
                        found.append((pid, listening[inode]))
    return found


def _wait(probe: Callable[[], bool], limit: float, what: str, explain: Callable[[], str]) -> None:
    deadline = time.monotonic() + limit
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}\n{explain()}")
        time.sleep(1)


@pytest.mark.timeout(900)
def test_quickstart_local_control_plane(preconditions: None, tmp_path: Path) -> None:
    text = section(2)
    first, second, disrupt = [[without_comment(c) for c in block] for block in bash_blocks(text)]
    (table,) = output_blocks(text)
    venv_bin = REPO / ".venv" / "bin"
    env = user_environment(
        tmp_path / "home", tmp_path, drop_from_path=(venv_bin, Path(sys.prefix) / "bin", bin_dir())
    )
    assert shutil.which("oma", path=env["PATH"]) is None  # the doc's export must provide it
    one = Terminal("1", REPO, env, tmp_path)
    two = Terminal("2", REPO, env, tmp_path)
    up: subprocess.Popen[bytes] | None = None
    sandboxes: set[str] = set()
    up_log = tmp_path / "local-cluster-up.log"

    def explain() -> str:
        status = [
            "kubectl -n oma get teamruns,pods -o wide",
            "kubectl -n oma get teamruns -o yaml",
            "kubectl -n oma get events",
            "kubectl -n oma logs deployment/oma-operator --tail=60",
        ]
        shown = [str(two.run(command, check=False, timeout=60)) for command in status]
        return "\n".join(
            [
                *two.transcript[-12:],
                *shown,
                "--- hack/local-cluster up:",
                up_log.read_text()[-3000:],
            ]
        )

    def phase(name: str) -> str:
        got = two.run(
            f"kubectl -n oma get teamrun {name} -o jsonpath='{{.status.phase}}'", check=False
        )
        assert got.stdout.strip() != "Failed", explain()
        return got.stdout.strip()

    try:
        # Terminal 1: the PATH, the binaries, the image, then the cluster in the foreground.
        assert first[-1].startswith("hack/local-cluster up"), first
        for command in first[:-1]:
            if command == "hack/build-image":
                continue  # built by hack/test before this step; the preconditions checked it
            one.run(command, timeout=600)
        assert "hack/build-image" in first
        assert f"--expose {REDIS_PORT}" in first[-1], first[-1]
        up = cluster = one.start(first[-1], up_log)
        _wait(
            lambda: "export KUBECONFIG=" in up_log.read_text() or cluster.poll() is not None,
            300,
            "hack/local-cluster up to print its KUBECONFIG line",
            lambda: up_log.read_text(),
        )
        started = up_log.read_text()
        assert up.poll() is None, started
        assert "is a kubelet with containerd" in started, started  # a real node, by default
        pods_reach = f"pods reach the host's 127.0.0.1:{REDIS_PORT} at {sandbox.HOST_IP}:"
        assert pods_reach in started, started
        # 'up' made a sandbox of its own (its state directory is in TMPDIR, named by its id).
        sandboxes = {p.name[: len("omak-") + 8] for p in tmp_path.glob("omak-*")}
        assert len(sandboxes) == 1, sorted(tmp_path.iterdir())
        assert _cgroups(sandboxes), "expected the real node's cgroups"
        (printed,) = re.findall(r"^export KUBECONFIG=(\S+)$", started, flags=re.MULTILINE)

        # Terminal 2: tools, KUBECONFIG, Redis, namespace, chart, Secret, the TeamRun.
        assert second[-1] == "kubectl -n oma get teamruns -w", second
        for command in second[:-1]:
            if DOC_REDIS_DIR in command:
                assert "--bind 127.0.0.1" in command and command.endswith("&"), command
                command = command.replace(DOC_REDIS_DIR, str(tmp_path / "oma-redis"))
            two.run(command, timeout=300)
            if command.startswith("export KUBECONFIG="):
                assert two.env["KUBECONFIG"] == printed  # the doc's path is the one 'up' printed
        assert len(two.jobs) == 1, two.transcript  # Redis, in the background
        _wait(
            lambda: _port_taken(REDIS_PORT),
            30,
            "Redis on 127.0.0.1:6379",
            lambda: "\n".join(two.transcript),
        )
        nodes = two.run("kubectl get nodes -o wide").stdout
        claimed = re.search(r"`kubectl get nodes -o wide` shows `(containerd://[^`]+)`", text)
        assert claimed and claimed[1] in nodes, nodes
        _wait(lambda: phase("demo") == "Succeeded", 300, "TeamRun demo to succeed", explain)
        shown = two.run(second[-1].removesuffix(" -w")).stdout
        _assert_table(shown, table)

        # Disrupt it: demo2, its pod deleted while it runs, resumes as attempt 2.
        apply, wait_then_delete, *checks = disrupt
        two.run(apply)
        pause, delete = (part.strip() for part in wait_then_delete.split(";"))
        assert re.fullmatch(r"sleep \d+", pause) and delete == "kubectl -n oma delete pod demo2-a1"
        (show,) = [c for c in checks if c.startswith("oma checkpoint show")]
        running = "kubectl -n oma get pod demo2-a1 -o jsonpath='{.status.phase}'"
        _wait(
            lambda: (
                two.run(running, check=False).stdout == "Running"
                and two.run(show, check=False).returncode == 0
            ),
            120,
            "pod demo2-a1 to run and the run's first checkpoint",
            explain,
        )
        two.run(delete)
        _wait(lambda: phase("demo2") == "Succeeded", 300, "TeamRun demo2 to succeed", explain)
        outputs = {command: two.run(command) for command in checks}
        got = outputs["kubectl -n oma get teamrun demo2"].stdout
        header, row = got.splitlines()[:2]
        columns = dict(zip(header.split(), row.split(), strict=False))
        assert (columns["PHASE"], columns["ATTEMPT"]) == ("Succeeded", "2"), got
        attempts = json.loads(
            outputs["kubectl -n oma get teamrun demo2 -o jsonpath='{.status.attempts}'"].stdout
        )
        outcomes = [(a.get("outcome"), a.get("reason"), a.get("exitCode")) for a in attempts]
        assert outcomes[0] == ("disruption", "Drained", 11), attempts
        assert [a.get("outcome") for a in attempts] == ["disruption", "succeeded"], attempts
        events = outputs["kubectl -n oma get events --field-selector involvedObject.name=demo2"]
        reasons = [line.split()[2] for line in events.stdout.splitlines()[1:] if line.strip()]
        assert "AttemptDisruption" in reasons and "Resumed" in reasons, events
        assert "AttemptStarted" not in reasons, events  # only with operator.events=all
        checkpoint = outputs[show].stdout
        assert checkpoint.startswith("run       demo-2  (attempt 2"), checkpoint
        assert "status    succeeded" in checkpoint, checkpoint

        # Everything a local command started listens on the loopback only.
        listening = _listening_on(tmp_path)
        assert any(address.endswith(f":{REDIS_PORT}") for _, address in listening), listening
        assert all(a.startswith(("127.0.0.1:", "::1:")) for _, a in listening), listening

        # Stop everything: Ctrl-C in the first terminal, then Redis.
        Terminal.interrupt(up)
        assert up.wait(timeout=120) == 0, up_log.read_text()[-3000:]
        assert two.run("hack/local-cluster status", check=False).stdout.startswith(
            "devcluster: not running"
        )
        two.stop_jobs()
    finally:
        if up is not None and up.poll() is None:
            Terminal.interrupt(up)
            try:
                up.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, 9)
        two.stop_jobs()
    assert wait_until_clean(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("omak-")] == []  # sandbox
    assert not _port_taken(REDIS_PORT)
    assert _cgroups(sandboxes) == []  # the node's cgroups went with its sandbox


def _cgroups(sandboxes: set[str]) -> list[Path]:
    """The cgroups named after these sandboxes (where ``sandbox.remove_cgroups`` looks)."""
    found: list[Path] = []
    for controller in [*sandbox.cgroup_controllers(), "unified"]:
        for root in {sandbox.cgroup_parent(controller), sandbox.CGROUP_FS / controller}:
            for ident in sandboxes:
                found += root.glob(f"*{ident}*")
    return found


def _assert_table(shown: str, doc: str) -> None:
    """``kubectl get teamruns`` against the doc's table: the same columns; the same values but
    the ages (CHECKPOINT, AGE), which only have to be ages."""
    doc_header, doc_row = doc.splitlines()[:2]
    header, row = shown.splitlines()[:2]
    assert header.split() == doc_header.split(), shown

    def cells(line: str, head: str) -> list[str]:
        starts = [m.start() for m in re.finditer(r"\S+", head)]
        ends = [*starts[1:], None]
        return [line[a:b].strip() for a, b in zip(starts, ends, strict=True)]

    got, want = cells(row, header), cells(doc_row, doc_header)
    assert got[:-2] == want[:-2], shown
    assert all(re.fullmatch(r"(\d+[smhd])+", age) for age in got[-2:]), shown
