"""Test servers' temp dirs: a dead session's are swept, a live one's in another pid namespace
(a test run inside devcluster's sandbox, or outside it while one runs inside) never."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.process import make_workdir


def test_dirs_of_dead_owners_here_go_and_dirs_of_other_pid_namespaces_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    here = os.readlink("/proc/self/ns/pid")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (tmp_path / "oma-x-dead").mkdir()
    (tmp_path / "oma-x-dead" / "owner.pid").write_text(f"{here} {dead}")
    # The same pid number, alive or not, means another process in another namespace.
    (tmp_path / "oma-x-elsewhere").mkdir()
    (tmp_path / "oma-x-elsewhere" / "owner.pid").write_text(f"pid:[4026531999] {dead}")
    made = make_workdir("oma-x-")
    assert not (tmp_path / "oma-x-dead").exists()
    assert (tmp_path / "oma-x-elsewhere").exists()
    assert (made / "owner.pid").read_text() == f"{here} {os.getpid()}"
    assert make_workdir("oma-x-") != made and made.exists()  # ours, alive: kept
