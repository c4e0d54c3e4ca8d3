"""The console script is installed and answers; a broken plugin costs its own commands only."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
from typer.main import get_command
from typer.testing import CliRunner

from oma import __version__
from oma.cli import app, load_plugins

REPO = Path(__file__).resolve().parents[2]


def test_version_command() -> None:
    flag = CliRunner().invoke(app, ["--version"])
    assert flag.exit_code == 0 and flag.output.startswith(f"oma {__version__} (Python 3.")
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"oma {__version__} (Python 3.")


def test_console_script_is_installed() -> None:
    completed = subprocess.run(
        [_oma_script(), "version"], capture_output=True, text=True, check=True
    )
    assert completed.stdout.startswith(f"oma {__version__}")


def _oma_script() -> str:
    # The script sits next to the interpreter of the environment the package is installed in.
    executable = shutil.which("oma", path=str(Path(sys.executable).parent))
    assert executable is not None, "the `oma` console script is not installed"
    return executable


def _install_plugins(site: Path) -> None:
    """A distribution on ``site`` (a PYTHONPATH entry) with two ``oma.cli`` entry points: one
    whose module raises on import, one that adds a ``hello`` command."""
    info = site / "oma_test_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: oma-test-plugins\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[oma.cli]\n"
        "broken = oma_test_broken_plugin:register\n"
        "hello = oma_test_hello_plugin:register\n",
        encoding="utf-8",
    )
    (site / "oma_test_broken_plugin.py").write_text(
        'raise RuntimeError("this plugin is broken on purpose\\nsecond line")\n', encoding="utf-8"
    )
    (site / "oma_test_hello_plugin.py").write_text(
        "import typer\n\n\n"
        "def register(app: typer.Typer) -> None:\n"
        '    app.command("hello")(lambda: typer.echo("hello from a plugin"))\n',
        encoding="utf-8",
    )


def test_a_broken_plugin_costs_its_own_commands_only(tmp_path: Path) -> None:
    _install_plugins(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    warning = (
        "oma: warning: plugin broken (oma_test_broken_plugin:register) not loaded: "
        "RuntimeError: this plugin is broken on purpose; its commands are "
        "unavailable (reinstall or remove the package that provides it)"
    )
    for argv, stdout in (
        (["version"], f"oma {__version__} (Python 3."),
        (["hello"], "hello from a plugin"),
    ):
        done = subprocess.run(
            [_oma_script(), *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(stdout)
        assert done.stderr.splitlines() == [warning]  # one line, no traceback
    # Without the broken distribution on the path, nothing is said.
    clean = subprocess.run(
        [_oma_script(), "version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert clean.stderr == ""


def _commands() -> dict[str, Any]:
    """Every ``oma`` command by its full name ("oma checkpoint show"), plugins included (loaded
    into a separate app, so that the module's ``app`` stays as the other tests know it). The
    values are click commands (``Any``: typer may bundle its own click)."""
    plugins = typer.Typer()
    plugins.callback()(lambda: None)
    load_plugins(plugins)
    found: dict[str, Any] = {}

    def walk(command: Any, name: str) -> None:
        found[name] = command
        for sub_name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{name} {sub_name}")

    walk(get_command(plugins), "oma")
    walk(get_command(app), "oma")
    return found


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_option_in_docs_cli_md_exists() -> None:
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = _commands()
    everywhere = set().union(*map(_options, commands.values())) | {"--help"}
    # Each "oma ..." line of a code block: its options belong to that very command.
    checked = 0
    for block in re.findall(r"```(?:bash)?\n(.*?)```", doc, flags=re.DOTALL):
        for line in block.splitlines():
            if not line.startswith("oma "):
                continue
            words = shlex.split(line.split(" #", 1)[0].replace("[", " ").replace("]", " "))
            name = "oma"
            while words[1:] and f"{name} {words[1]}" in commands:
                name, words = f"{name} {words[1]}", words[1:]
            unknown = {w for w in words if w.startswith("-")} - _options(commands[name])
            assert not unknown, f"docs/cli.md: {line!r}: {name} has no {sorted(unknown)}"
            checked += 1
    assert checked >= 6
    # Every option named in the prose exists on some command.
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", doc, flags=re.DOTALL))
    named = {m for span in spans for m in re.findall(r"(?<![\w/-])--?[a-z][a-z-]*", span)}
    assert {"--display-name", "--hash", "--reviewer", "--events", "-o"} <= named
    assert named <= everywhere, f"docs/cli.md names unknown options {sorted(named - everywhere)}"


def test_shell_completion_is_offered_and_completes_commands() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    oma = [str(Path(sys.executable).parent / "oma")]  # the installed command, as a shell runs it
    script = subprocess.run(
        [*oma, "--show-completion", "bash"], capture_output=True, text=True, check=True
    )
    assert "_oma_completion" in script.stdout
    for words, cword, expected in (
        ("oma check", "1", "checkpoint"),
        ("oma checkpoint sh", "2", "show"),
    ):
        env = {
            **os.environ,
            "_OMA_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": cword,
        }
        done = subprocess.run(oma, capture_output=True, text=True, env=env, check=True)
        assert done.stdout.split() == [expected], done
