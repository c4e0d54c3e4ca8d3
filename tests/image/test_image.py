"""The podman-built image: both entrypoints run, as non-root, on a read-only root filesystem,
and the command the operator puts in runner pods is the image's runner entrypoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.settings import RunnerPodSettings

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("OMA_IMAGE", "localhost/oma:dev")
PODMAN = ["podman", "--storage-driver", "vfs"]
RUN = [
    *PODMAN,
    "run",
    "--rm",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--read-only",
    "--network",
    "none",
]


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    missing = [tool for tool in ("podman", "debootstrap") if shutil.which(tool) is None]
    if missing:
        message = f"{', '.join(missing)} not installed (Debian packages; hack/test installs them)"
        if os.environ.get("OMA_REQUIRE_IMAGE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("build-image-tmp")
    built = subprocess.run(
        [str(REPO / "hack" / "build-image")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "OMA_IMAGE": IMAGE, "TMPDIR": str(tmp)},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # Its own temporary directories (the wheel context, a debootstrap root) are all removed.
    assert sorted(p.name for p in tmp.glob("tmp.*")) == []
    print(f"\nimage {IMAGE} built in {time.monotonic() - started:.0f}s")
    return IMAGE


def _run(
    image: str, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    flags = [arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")]
    # vfs copies the image for each container: minutes on a loaded machine (CI runs suites
    # side by side), so the limit is generous; a hang still ends the test.
    return subprocess.run([*RUN, *flags, image, *argv], capture_output=True, text=True, timeout=420)


@pytest.mark.timeout(1500)
def test_both_entrypoints_run_as_non_root_read_only(image: str) -> None:
    operator = _run(image, "oma-operator", "--help")
    assert operator.returncode == 0 and "usage: oma-operator" in operator.stdout
    runner = _run(image, "oma-runner", "--help")
    assert runner.returncode == 0 and "oma-runner" in runner.stdout
    # The operator's peering id (kopf) asks for the user's name outside a pod: it must have one.
    # Its uid; and the tracing extra (docs/tracing.md) is installed: OTEL_* alone turns it on.
    who = _run(
        image, "python3", "-c",
        "import getpass, os; from oma.tracing import run_tracer; "
        "print(getpass.getuser(), os.getuid(), run_tracer() is not None)",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
    )  # fmt: skip
    assert who.stdout.split() == ["oma", "65532", "True"], who.stderr


def test_the_operators_runner_command_is_the_images_entrypoint(image: str) -> None:
    spec = TeamRunSpec.model_validate(
        {
            "team": {
                "agents": [
                    {"name": "w", "model": {"provider": "scripted", "script": [{"text": "done"}]}}
                ]
            },
            "tasks": [{"title": "T", "description": "d"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "k"}}},
        }
    )
    body: TeamRunBody = {"metadata": {"name": "t", "namespace": "n", "uid": "u"}, "spec": {}}
    command = runner_pod(body, spec, 1, RunnerPodSettings(image=image))["spec"]["containers"][0][
        "command"
    ]
    run_spec = {
        "runId": "in-image",
        "agents": [
            {
                "name": "w",
                "model": {"provider": "scripted", "script": [{"text": "done in the image"}]},
            }
        ],
        "tasks": [{"title": "T", "description": "d"}],
        "store": {"file": {"path": "/tmp/store.json"}},
    }
    shell = " ".join(command) + "; echo exit=$?; cat /tmp/termination"
    result = _run(
        image,
        "sh",
        "-c",
        shell,
        env={"OMA_RUN_SPEC": json.dumps(run_spec), "OMA_TERMINATION_LOG": "/tmp/termination"},
    )
    assert "exit=0" in result.stdout, result.stdout + result.stderr
    report = json.loads(result.stdout.split("exit=0", 1)[1].strip())
    assert report["status"] == "ok" and report["runId"] == "in-image"


@pytest.mark.timeout(1500)
def test_a_plain_build_of_a_clean_clone_works(image: str, tmp_path: Path) -> None:
    """``podman build .`` (as ``docker build .``) from a fresh clone: the Dockerfile's first
    stage builds the wheels from the source (from PyPI, given pip's CA as a build secret where
    a proxy intercepts TLS, as here), no prepared wheels/ needed."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    tag = f"{image}-from-source"
    ca = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    secret = ["--secret", f"id=pip-ca,src={ca}"] if ca and Path(ca).is_file() else []
    built = subprocess.run(
        [
            *PODMAN, "build", "--runtime", "runc", "--ulimit", "nofile=1024:1024",
            "--ulimit", "nproc=1024:1024", *secret,
            # the base hack/build-image made (no registry here); elsewhere the default python
            "--build-arg", "BASE=localhost/oma-base:bookworm", "-t", tag, ".",
        ],
        cwd=clone, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        runner = _run(tag, "oma-runner", "--help")
        assert runner.returncode == 0 and "oma-runner" in runner.stdout
    finally:
        subprocess.run([*PODMAN, "rmi", "-f", tag], capture_output=True, check=False)
