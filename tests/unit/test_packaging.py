"""What pip installs: `pip install oma` is the engine alone, drivers, provider SDKs and the
operator are extras, and using one that is missing is one line naming the extra to install; the
version is written once (issue 42)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from oma.errors import MissingExtraError, OmaError
from oma.extras import EXTRA_OF, needs_extra

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "kopf",
    "kr8s",
    "psycopg",
    "redis",
    "anthropic",
    "openai",
    "httpx",
    "prometheus-client",
    "opentelemetry-sdk",
)


def test_a_missing_package_an_extra_provides_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(MissingExtraError) as missing, needs_extra("the PostgreSQL store"):
        import psycopg
    assert str(missing.value) == (
        "the PostgreSQL store needs the psycopg package: pip install 'oma[postgres]'"
    )
    assert isinstance(missing.value, ImportError) and isinstance(missing.value, OmaError)
    assert missing.value.code == "MISSING_EXTRA" and not missing.value.transient
    # Any other missing module is not ours to explain.
    with pytest.raises(ImportError) as other, needs_extra("x"):
        import oma_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert not isinstance(other.value, MissingExtraError)
    # A command that needs all of one extra names that one, whichever package is missing.
    with pytest.raises(MissingExtraError) as command, needs_extra("oma-operator", "operator"):
        import psycopg  # noqa: F401
    assert str(command.value).endswith("pip install 'oma[operator]'")


def test_every_extra_is_declared_and_all_gathers_them() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(extras)
    named = {e for e in extras if e not in ("all", "dev")}
    assert extras["all"] == [f"oma[{','.join(sorted(named, key=list(extras).index))}]"]
    assert "oma[all]" in extras["dev"]
    base = " ".join(project["dependencies"])
    assert not [name for name in HEAVY if name in base], base


@pytest.mark.timeout(600)
def test_a_plain_install_is_light_and_runs_the_demo(tmp_path: Path) -> None:
    """A fresh venv, `pip install .` (from PyPI for its dependencies): none of the heavy
    packages, `oma run examples/demo.yaml` works, and what needs an extra says which."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def run(*argv: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=540, check=False
        )

    installed = run(str(bin_dir / "pip"), "install", "-q", str(ROOT))
    assert installed.returncode == 0, installed.stderr[-3000:]
    listed = run(str(bin_dir / "pip"), "list", "--format=freeze")
    # pip writes prometheus_client, PyPI prometheus-client: compare in one spelling.
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.stdout.splitlines()}
    assert not [name for name in HEAVY if name in names], sorted(names)
    demo = run(str(bin_dir / "oma"), "run", str(ROOT / "examples" / "demo.yaml"))
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "status ok" in demo.stdout
    assert "warning" not in demo.stderr, demo.stderr  # no plugin complains about its extra
    spec = tmp_path / "redis.yaml"
    spec.write_text(
        "runId: r\nagents: [{name: w, model: {provider: scripted, script: [{text: x}]}}]\n"
        "tasks: [{title: T, description: d}]\nstore: {redis: {url: 'redis://127.0.0.1:1/0'}}\n"
    )
    needs = run(str(bin_dir / "oma"), "run", str(spec))
    assert needs.returncode == 2, needs
    assert needs.stderr.strip() == (
        "error: MISSING_EXTRA: the Redis store needs the redis package: pip install 'oma[redis]'"
    )
    for command, line in (
        ((str(bin_dir / "oma-operator"), "--help"), "oma-operator: oma-operator needs the "),
        ((str(bin_dir / "oma"), "approve", "x"), "error: this command needs the "),
    ):
        done = run(*command)
        assert done.returncode == 2, done
        assert done.stderr.startswith(line) and "pip install 'oma[operator]'" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_version_is_written_once_and_the_chart_follows_it() -> None:
    from importlib.metadata import version

    import yaml

    from oma import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert version("oma") == __version__  # what pip installed, read from oma.__version__
    chart = yaml.safe_load((ROOT / "charts" / "oma" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
