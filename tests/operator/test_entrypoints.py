"""The operator's entry points: its client and kopf's connection in a pod (the service account
and the service address from the environment, a token re-read when refused) and outside one
(the kubeconfig), and the flags of the chart's uninstall hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma_operator import runtime
from oma_operator.k8s.client import Kube
from oma_operator.login import connection_info
from oma_operator.runs.retention import FINISHED
from oma_operator.runs.run_queue import RUN_QUEUE


@pytest.fixture
def account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text("the-token")
    (folder / "namespace").write_text("team-a")
    (folder / "ca.crt").write_bytes(Path("/etc/ssl/certs/ca-certificates.crt").read_bytes())
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # as in a pod
    return folder


async def test_in_a_pod_the_service_address_and_account_are_used(
    account: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    kube = await Kube.connect(serviceaccount=str(account))
    assert kube.server == "https://10.96.0.1:6443"  # not kubernetes.default.svc
    assert kube.namespace == "team-a"
    monkeypatch.setattr(runtime, "_kube", kube)
    info = await connection_info()
    assert info.server == "https://10.96.0.1:6443" and info.token == "the-token"
    assert info.ca_path == str(account / "ca.crt") and info.default_namespace == "team-a"
    (account / "token").write_text("rotated")  # a projected token, renewed by the kubelet
    assert (await connection_info()).token == "rotated"  # kopf logs in again after a 401
    await kube.aclose()


async def test_an_ipv6_service_address_is_bracketed(
    account: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    kube = await Kube.connect(serviceaccount=str(account))
    assert kube.server == "https://[fd00::1]:443"
    await kube.aclose()


async def test_without_a_kubeconfig_or_an_account_there_are_no_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="credentials"):
        await Kube.connect(serviceaccount=str(tmp_path / "no-account"))


def test_stop_deployment_needs_exactly_one_namespace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from oma_operator.main import main

    for argv in (["--stop-deployment", "x"], ["--stop-deployment", "x", "--all-namespaces"]):
        monkeypatch.setattr("sys.argv", ["oma-operator", *argv])
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 2
        assert "--stop-deployment needs exactly one --namespace" in capsys.readouterr().err


def test_a_bad_concurrency_limit_stops_the_operator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from oma_operator import main as entry

    started: list[str] = []
    monkeypatch.setattr(entry, "serve", lambda *_: started.append("metrics"))
    monkeypatch.setenv("OMA_MAX_RUNNING_PER_PROVIDER", "openai=10,openai=5")
    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "team-a"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert str(exited.value) == (
        "oma-operator: OMA_MAX_RUNNING_PER_PROVIDER: 'openai=5': openai is limited twice"
    )
    assert started == []  # nothing served, no watch started


@pytest.mark.parametrize("value", ["-1", "1.5", "a day", "31536001"])
def test_a_bad_default_time_to_live_stops_the_operator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from oma_operator import main as entry

    started: list[str] = []
    monkeypatch.setattr(entry, "serve", lambda *_: started.append("metrics"))
    monkeypatch.setenv("OMA_TTL_SECONDS_AFTER_FINISHED", value)
    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "team-a"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert str(exited.value).startswith(f"oma-operator: OMA_TTL_SECONDS_AFTER_FINISHED={value!r}")
    assert started == []


def test_an_unknown_log_format_stops_the_operator_with_the_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from oma_operator.main import main

    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "a", "--log-format", "xml"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert "--log-format: 'xml' is not one of plain, json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "value", "choices"),
    [
        ("OMA_LOG_FORMAT", "xml", "plain, json"),
        ("OMA_LOG_LEVEL", "verbose", "debug, info, warning"),
        ("OMA_EVENTS", "some", "notable, all"),
        ("OMA_CREATOR_POLICY", "yes", "installed, absent"),
    ],
)
def test_a_bad_choice_in_the_environment_stops_the_operator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    choices: str,
) -> None:
    """argparse checks ``choices`` on the command line only: a default from the environment
    is checked by the flag's type."""
    from oma_operator import main as entry

    started: list[str] = []
    monkeypatch.setattr(entry, "serve", lambda *_: started.append("metrics"))
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "team-a"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert f"{value!r} is not one of {choices}" in capsys.readouterr().err
    assert started == []


class _Started(Exception):
    """Raised where the operator would start serving: its settings are all taken by then."""


def _start(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], variable: str, value: str | None
) -> tuple[object, ...]:
    """Run the operator's entry point with ``variable`` set to ``value`` (unset: None) up to
    where it would serve (what it would serve with); the settings it wrote are put back after
    the test."""
    from oma_operator import main as entry

    served: list[tuple[object, ...]] = []

    def serve(*args: object) -> None:
        served.append(args)
        raise _Started

    monkeypatch.setattr(entry, "serve", serve)
    monkeypatch.setattr(entry, "configure_logging", lambda *_: None)  # process-wide
    monkeypatch.setattr(runtime, "_settings", runtime.settings())
    monkeypatch.setattr(RUN_QUEUE, "limits", RUN_QUEUE.limits)
    for setting in ("default_ttl", "delete_store_records"):
        monkeypatch.setattr(FINISHED, setting, getattr(FINISHED, setting))
    if value is None:
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, value)
    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "team-a", *argv])
    with pytest.raises(_Started):
        entry.main()
    return served[0]


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [([], None, "notable"), ([], "all", "all"), (["--events", "notable"], "all", "notable")],
)
def test_the_events_setting_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str | None, expected: str
) -> None:
    _start(monkeypatch, argv, "OMA_EVENTS", env)
    assert expected == runtime.settings().events


def test_a_bad_delete_store_records_setting_stops_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from oma_operator import main as entry

    monkeypatch.setattr(entry, "serve", lambda *_: None)
    monkeypatch.setenv("OMA_DELETE_STORE_RECORDS", "sometimes")
    monkeypatch.setattr("sys.argv", ["oma-operator", "--namespace", "team-a"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert str(exited.value) == (
        "oma-operator: OMA_DELETE_STORE_RECORDS='sometimes': give true or false (or 1 or 0)"
    )


@pytest.mark.parametrize(
    ("argv", "env", "recorded"),
    [
        ([], None, False),  # fails closed: the annotation is not believed
        ([], "installed", True),
        (["--creator-policy", "absent"], "installed", False),
    ],
)
def test_the_creator_policy_setting_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str | None, recorded: bool
) -> None:
    _start(monkeypatch, argv, "OMA_CREATOR_POLICY", env)
    assert runtime.settings().creator_recorded is recorded


def test_main_installs_one_settings_object_from_its_flags_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_RUNNER_IMAGE", "registry.example/oma:2")
    monkeypatch.setenv("OMA_MAX_RUNNING_PER_NAMESPACE", "2")
    _start(monkeypatch, ["--runner-metrics-port", "9100"], "OMA_TTL_SECONDS_AFTER_FINISHED", "60")
    settings = runtime.settings()
    assert settings.namespaces == ("team-a",)
    assert (settings.runner.image, settings.runner.metrics_port) == ("registry.example/oma:2", 9100)
    assert RUN_QUEUE.limits is settings.limits and settings.limits.per_namespace == 2
    assert FINISHED.default_ttl == settings.finished_ttl_seconds == 60


def test_the_uninstall_hook_runs_whatever_the_run_settings_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad run setting must not keep ``helm uninstall`` from stopping the operator."""
    from oma_operator import main as entry

    stopped: list[tuple[str, str]] = []

    async def stop(namespace: str, deployment: str, wait_seconds: float) -> int:
        stopped.append((namespace, deployment))
        return 0

    async def connected(work: Any) -> int:
        return int(await work)

    monkeypatch.setattr(entry, "stop_operator", stop)
    monkeypatch.setattr(entry, "_connected", connected)
    monkeypatch.setattr(entry, "configure_logging", lambda *_: None)
    monkeypatch.setenv("OMA_PROGRESS_SECONDS", "soon")
    argv = ["oma-operator", "--namespace", "oma", "--stop-deployment", "oma-operator"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0 and stopped == [("oma", "oma-operator")]


def test_a_local_operator_serves_its_metrics_on_loopback_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _start(monkeypatch, [], "OMA_METRICS_ADDRESS", None) == (8000, "127.0.0.1")
    assert _start(monkeypatch, [], "OMA_METRICS_ADDRESS", "0.0.0.0") == (8000, "0.0.0.0")
