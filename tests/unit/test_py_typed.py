"""User code under ``mypy --strict`` sees oma's real types (PEP 561: ``py.typed`` shipped)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_CODE = """
from oma import OpenMultiAgent
from oma.store import RedisStore

wrong: int = OpenMultiAgent
store: RedisStore = RedisStore("redis://127.0.0.1:1", namespace="n")
namespace: int = store.namespace
"""


@pytest.mark.timeout(180)
def test_mypy_strict_on_user_code_sees_oma_types(tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(USER_CODE)
    # Run outside the repository, so the installed package is what mypy finds, not src/.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "py.typed" not in result.stdout, result.stdout  # not "missing library stubs"
    assert 'expression has type "type[OpenMultiAgent]", variable has type "int"' in result.stdout
    assert 'expression has type "str", variable has type "int"' in result.stdout
    assert "Found 2 errors" in result.stdout, result.stdout


@pytest.mark.timeout(300)
def test_the_wheel_ships_py_typed_for_every_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("oma-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("oma", "oma_operator", "oma_runner"):
        assert f"{package}/py.typed" in names, sorted(n for n in names if n.startswith(package))[:5]
