"""The operator's entry points: kopf's connection in a pod (the service address from the
environment, like our own client) and the flags of the chart's uninstall hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from oma_operator.client import in_cluster_server
from oma_operator.login import service_account_login


@pytest.fixture
def account(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("the-token\n")
    (tmp_path / "namespace").write_text("team-a\n")
    (tmp_path / "ca.crt").write_text("not read here")
    return tmp_path


def test_in_a_pod_kopf_dials_the_service_address_not_a_dns_name(account: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    info = service_account_login(env, account)
    assert info is not None
    assert info.server == "https://10.96.0.1:6443"
    assert info.token == "the-token" and info.default_namespace == "team-a"
    assert info.ca_path == str(account / "ca.crt")


def test_an_ipv6_service_address_is_bracketed(account: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1"}
    assert in_cluster_server(env, account) == "https://[fd00::1]:443"


def test_outside_a_pod_there_is_no_in_cluster_login(tmp_path: Path, account: Path) -> None:
    # No service variable (a laptop), or a variable but no token (a pod without one).
    assert service_account_login({}, account) is None
    assert service_account_login({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, tmp_path / "x") is None


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
