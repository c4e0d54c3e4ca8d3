"""devcluster's own guarantees that need no cluster: clear errors, no orphans, expansion."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from devcluster import ControlPlane, MissingBinaryError, PortInUseError
from devcluster.controlplane import ControlPlaneOptions, Ports
from devcluster.images import prune_archives
from devcluster.podenv import expand, field_value
from devcluster.podstatus import exit_code
from tests.cluster.helpers import wait_for


async def test_missing_binary_says_to_run_ensure_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_K8S_BIN", str(tmp_path / "empty"))
    cp = ControlPlane(tmp_path / "work")
    with pytest.raises(MissingBinaryError, match="hack/k8s/ensure-binaries"):
        await cp.start()


async def test_taken_port_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("OMA_K8S_BIN", str(bin_dir))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cp = ControlPlane(tmp_path / "work", ControlPlaneOptions(ports=Ports(apiserver=port)))
        with pytest.raises(PortInUseError, match=f"port {port} .*kube-apiserver.* is taken"):
            await cp.start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (its parent, init here, may not have reaped it yet); a process
    # can also vanish between the signal check and the read (ESRCH, ENOENT).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """A SIGKILLed owner (no atexit, no cleanup) leaves no child behind."""
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import asyncio, os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "hack")!r})
        from pathlib import Path
        from devcluster.procs import ChildProcess

        async def main():
            child = await ChildProcess.spawn(
                "sleeper", ["sleep", "300"], Path({str(tmp_path / "log")!r})
            )
            Path({str(pid_file)!r}).write_text(str(child.pid))
            await asyncio.sleep(300)

        asyncio.run(main())
    """)
    owner = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the owner did not start its child"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while _alive(child):
            assert time.monotonic() < deadline, f"child {child} outlived its killed owner"
            time.sleep(0.05)
    finally:
        owner.kill()
        owner.wait()


def test_kubelet_style_expansion_and_fields() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)-$$(A)-$(MISSING)", env) == "x-y-$(A)-$(MISSING)"
    pod = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"app": "a"}},
        "spec": {"nodeName": "node"},
    }
    assert field_value(pod, "metadata.uid") == "u"
    assert field_value(pod, "metadata.labels['app']") == "a"
    assert field_value(pod, "spec.nodeName") == "node"
    assert exit_code(-15) == 143
    assert exit_code(3) == 3


async def test_spawned_process_group_is_stopped(tmp_path: Path) -> None:
    from devcluster.procs import ChildProcess

    child = await ChildProcess.spawn(
        "trapper",
        ["sh", "-c", "trap '' TERM; echo trapped; sleep 60 & wait"],
        tmp_path / "log",
    )

    async def trapped() -> bool:
        return "trapped" in child.tail()

    await wait_for(trapped, 10, "the shell to ignore SIGTERM", interval=0.02)
    code = await child.stop(grace=0.5)  # ignores SIGTERM: SIGKILL after the grace period
    assert exit_code(code) == 137


def test_old_podman_archives_are_pruned_and_recent_ones_kept(tmp_path: Path) -> None:
    """Each image build leaves a ~470 MB archive in the real node's cache: the newest few and
    any young enough to be in use by a start under way stay, the rest go."""
    now = 1_000_000_000.0
    hour = 3600.0
    ages = {"a": 0.1, "b": 1, "c": 3, "d": 4, "e": 5, "f": 6}  # hours old
    for name, age in ages.items():
        path = tmp_path / f"podman-{name}.tar"
        path.write_bytes(b"x")
        os.utime(path, (now - age * hour, now - age * hour))
    (tmp_path / "busybox-1.tar").write_bytes(b"x")  # not a podman archive: never touched
    os.utime(tmp_path / "busybox-1.tar", (now - 100 * hour, now - 100 * hour))
    just_written = tmp_path / "podman-f.tar"  # the oldest mtime, yet the one being used
    deleted = prune_archives(tmp_path, keep=just_written, now=now)
    # Kept: f (just written) and the 3 newest others (a, b, c); d and e are old enough to go.
    assert sorted(p.name for p in deleted) == ["podman-d.tar", "podman-e.tar"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["busybox-1.tar", "podman-a.tar", "podman-b.tar", "podman-c.tar", "podman-f.tar"]
    # Four newer builds: c (3 hours old) is no longer among the newest and goes; a, b and the
    # fourth new one stay beyond the newest few, young enough that a start may import them.
    for name in "ghij":
        path = tmp_path / f"podman-{name}.tar"
        path.write_bytes(b"x")
        os.utime(path, (now, now))
    deleted = prune_archives(tmp_path, keep=just_written, now=now)
    assert [p.name for p in deleted] == ["podman-c.tar"]
    assert len(list(tmp_path.glob("podman-*.tar"))) == 7
