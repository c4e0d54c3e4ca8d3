"""The console script is installed and answers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from oma import __version__
from oma.cli import app


def test_version_command() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"oma {__version__} (Python 3.")


def test_console_script_is_installed() -> None:
    # The script sits next to the interpreter of the environment the package is installed in.
    executable = shutil.which("oma", path=str(Path(sys.executable).parent))
    assert executable is not None, "the `oma` console script is not installed"
    completed = subprocess.run([executable, "version"], capture_output=True, text=True, check=True)
    assert completed.stdout.startswith(f"oma {__version__}")
