"""The operator's settings: one immutable object read once at its start, where a bad value
stops the operator naming the variable and what to write, before anything has run."""

from __future__ import annotations

import dataclasses

import pytest

from oma_operator import runtime
from oma_operator.settings import (
    DEFAULT_RUNNER_IMAGE,
    Limits,
    RunnerPodSettings,
    Settings,
    SettingsError,
)


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    settings = Settings.read({})
    assert settings == Settings()
    assert settings.runner == RunnerPodSettings(image=DEFAULT_RUNNER_IMAGE)
    assert (settings.progress_seconds, settings.secret_ttl_seconds) == (15.0, 60.0)
    assert settings.poll_read_limit_bytes == 8 * 1024 * 1024
    assert (settings.finished_ttl_seconds, settings.delete_store_records) == (None, False)
    assert (settings.api_qps, settings.api_burst) == (100.0, 200)
    assert settings.limits == Limits() and not settings.limits.active
    assert (settings.events, settings.creator_recorded, settings.namespaces) == (
        "notable",
        False,
        (),
    )


def test_every_variable_and_flag_reaches_its_field() -> None:
    env = {
        "OMA_RUNNER_IMAGE": "registry.example/oma:1.2",
        "OMA_RUNNER_SERVICE_ACCOUNT": "oma-runner",
        "OMA_RUNNER_IMAGE_PULL_SECRETS": " regcred, ,mirror ",
        "OMA_RUNNER_OTLP_ENDPOINT": "http://otel.obs:4318",
        "OMA_PROGRESS_SECONDS": "2.5",
        "OMA_SECRET_TTL_SECONDS": "5",
        "OMA_POLL_READ_LIMIT_BYTES": "2048",
        "OMA_MAX_RUNNING_PER_NAMESPACE": "3",
        "OMA_MAX_RUNNING_PER_PROVIDER": "anthropic=2",
        "OMA_TTL_SECONDS_AFTER_FINISHED": "0",
        "OMA_DELETE_STORE_RECORDS": "TRUE",
        "OMA_API_QPS": "12.5",
        "OMA_API_BURST": "30",
    }
    settings = Settings.read(
        env,
        namespaces=("team-a", "team-b"),
        events="all",
        creator_recorded=True,
        log_format="json",
        runner_metrics_port=9100,
    )
    assert settings.runner == RunnerPodSettings(
        image="registry.example/oma:1.2",
        service_account="oma-runner",
        image_pull_secrets=("regcred", "mirror"),
        metrics_port=9100,
        otlp_endpoint="http://otel.obs:4318",
        log_format="json",
    )
    assert settings.namespaces == ("team-a", "team-b")
    assert (settings.events, settings.creator_recorded) == ("all", True)
    assert (settings.progress_seconds, settings.secret_ttl_seconds) == (2.5, 5.0)
    assert settings.poll_read_limit_bytes == 2048
    assert settings.limits == Limits(per_namespace=3, per_provider={"anthropic": 2})
    assert (settings.finished_ttl_seconds, settings.delete_store_records) == (0, True)
    assert (settings.api_qps, settings.api_burst) == (12.5, 30)


@pytest.mark.parametrize(
    ("variable", "text", "says"),
    [
        ("OMA_PROGRESS_SECONDS", "soon", "'soon' is not a number of seconds"),
        ("OMA_PROGRESS_SECONDS", "0", "must be more than 0 seconds"),
        ("OMA_PROGRESS_SECONDS", "-3", "must be more than 0 seconds"),
        ("OMA_PROGRESS_SECONDS", "nan", "must be more than 0 seconds"),
        ("OMA_PROGRESS_SECONDS", "inf", "must be more than 0 seconds"),  # a timer never due
        ("OMA_SECRET_TTL_SECONDS", "1m", "is not a number of seconds"),
        ("OMA_POLL_READ_LIMIT_BYTES", "8MiB", "must be a number of bytes, more than 0"),
        ("OMA_POLL_READ_LIMIT_BYTES", "0", "must be a number of bytes, more than 0"),
        ("OMA_POLL_READ_LIMIT_BYTES", "1.5", "must be a number of bytes, more than 0"),
        ("OMA_TTL_SECONDS_AFTER_FINISHED", "1h", "give whole seconds, 0 to 31536000"),
        ("OMA_TTL_SECONDS_AFTER_FINISHED", "31536001", "give whole seconds, 0 to 31536000"),
        ("OMA_DELETE_STORE_RECORDS", "sometimes", "give true or false (or 1 or 0)"),
        ("OMA_MAX_RUNNING_PER_NAMESPACE", "many", "is not a whole number"),
        ("OMA_API_QPS", "fast", "is not a number of requests a second"),
        ("OMA_API_QPS", "0", "must be more than 0 requests a second"),
        ("OMA_API_QPS", "inf", "must be more than 0 requests a second"),
        ("OMA_API_BURST", "0", "must be a whole number, at least 1"),
        ("OMA_API_BURST", "2.5", "must be a whole number, at least 1"),
        ("OMA_MAX_RUNNING_PER_PROVIDER", "gemini=2", "PROVIDER one of"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_and_what_to_write(
    variable: str, text: str, says: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.read({variable: text})
    assert str(refused.value).startswith(variable), refused.value
    assert says in str(refused.value)


def test_settings_cannot_be_changed_once_read() -> None:
    settings = Settings.read({"OMA_PROGRESS_SECONDS": "2"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.progress_seconds = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.runner.image = "attacker/image"  # type: ignore[misc]


def test_the_process_uses_the_settings_main_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_settings", runtime.settings())  # put back after the test
    installed = Settings(progress_seconds=3.0)
    runtime.configure(installed)
    assert runtime.settings() is installed
