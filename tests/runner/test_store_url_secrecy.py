"""A runner pod reads its store URL from the TeamRun's Secret ($OMA_STORE_URL): it opens only a
server of its store's kind (never a file or memory store, which would lose the run), and neither
its log nor its termination message (which the operator copies into the TeamRun's status) shows
anything of the value, even when the Secret's key holds a bare password."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runner.runner_process import runner_env, runner_spec, start_runner, termination_message
from tests.servers.process import free_port

SECRET = "hunter2-S3cret!"


def pieces(secret: str, size: int = 6) -> list[str]:
    return [secret[i : i + size] for i in range(max(1, len(secret) - size + 1))]


def run_with_store_url(tmp_path: Path, kind: str, url: str) -> tuple[int, str]:
    field = {"redis": "urlEnv", "postgres": "dsnEnv"}[kind]
    store = {kind: {field: "OMA_STORE_URL"}, "tenant": "team-a"}
    runner = start_runner(runner_env(tmp_path, runner_spec(store), OMA_STORE_URL=url))
    out, _ = runner.communicate(timeout=120)
    message = termination_message(tmp_path)
    return runner.returncode, f"{out}\n{message}"


@pytest.mark.parametrize("kind", ["redis", "postgres"])
@pytest.mark.parametrize("value", [SECRET, f"{SECRET}\n", "hunter2:S3cret!"])
def test_a_bare_password_ends_the_attempt_showing_none_of_it(
    tmp_path: Path, kind: str, value: str
) -> None:
    code, shown = run_with_store_url(tmp_path, kind, value)
    assert code == 2, shown
    assert "the store URL in $OMA_STORE_URL is not a URL" in shown
    for piece in pieces(SECRET):
        assert piece not in shown, shown


@pytest.mark.parametrize(
    ("kind", "url", "scheme"),
    [
        ("redis", "memory://", "memory"),
        ("redis", "file:///tmp/runner-state.json", "file"),
        ("postgres", "file:///tmp/runner-state.json", "file"),
        ("postgres", f"redis://:{SECRET}@127.0.0.1:6379/0", "redis"),
    ],
)
def test_a_store_url_of_another_kind_is_refused(
    tmp_path: Path, kind: str, url: str, scheme: str
) -> None:
    code, shown = run_with_store_url(tmp_path, kind, url)
    assert code == 2, shown
    assert f"has scheme {scheme!r}, which a run spec's {kind} store may not use" in shown
    assert "runner-state" not in shown
    assert all(piece not in shown for piece in pieces(SECRET)), shown


def test_an_unreachable_store_shows_no_password(tmp_path: Path) -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    code, shown = run_with_store_url(tmp_path, "redis", url)
    assert code == 1, shown  # transient: the operator tries again
    assert "127.0.0.1" in shown
    assert all(piece not in shown for piece in pieces(SECRET)), shown


def test_a_message_that_quotes_the_store_url_anyway_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The belt: whatever ends the attempt, its termination message and log line have the
    store URL the pod got from the Secret masked."""
    from prometheus_client import CollectorRegistry

    from oma_runner.config import RunnerConfig
    from oma_runner.logs import RunnerLog
    from oma_runner.main import _report
    from oma_runner.metrics import RunnerMetrics

    url = f"redis://:{SECRET}@db.invalid:6379/0?ssl_password=Zq9-ssl-Kx7wv"
    monkeypatch.setenv("OMA_STORE_URL", url)
    store = {"redis": {"urlEnv": "OMA_STORE_URL"}}
    config = RunnerConfig.from_env(runner_env(tmp_path, runner_spec(store)))
    _report(
        config,
        "failed",
        f"STORE_ERROR: echoed {url!r}, {SECRET}, Zq9-ssl-Kx7wv",
        RunnerMetrics(CollectorRegistry()),  # not the process's default registry
        RunnerLog("plain", {}),
    )
    message = termination_message(tmp_path)["message"]
    assert message.startswith("STORE_ERROR: echoed")
    for secret in (SECRET, "Zq9-ssl-Kx7wv"):
        assert all(piece not in message for piece in pieces(secret)), message
