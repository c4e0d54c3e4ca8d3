"""Fault kinds beyond a SIGKILL at a write: torn file-store files, a store server restarted
mid-save, and two live attempts of one run. Tables are printed (run with ``-s``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import backend_store_for
from tests.faults.scenarios import (
    TEARS,
    RestartReport,
    TwoAttemptsReport,
    markdown,
    run_restarts,
    run_tears,
    run_two_attempts,
)
from tests.servers.postgres_server import PostgresServer, postgres_bin_dir
from tests.servers.redis_server import RedisServer, redis_binary

_restarts: dict[str, RestartReport] = {}
_two: dict[str, TwoAttemptsReport] = {}


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_torn_and_corrupt_state_files(tmp_path: Path) -> None:
    report = run_tears(tmp_path, [2, 8, 14])
    print(
        "\n"
        + markdown(
            (
                "file store tears",
                "scenarios",
                "went on from last good state",
                "typed error naming the file",
                "untyped or unhelpful errors",
                "diverged",
                "committed re-run",
            ),
            [
                (
                    f"{len(TEARS)} kinds x 3 boundaries",
                    report.scenarios,
                    report.last_good_used,
                    report.typed_errors,
                    report.bad_errors,
                    report.diverged,
                    report.committed_rerun,
                )
            ],
        )
    )
    assert report.scenarios == 3 * len(TEARS)
    assert report.failures == [], "\n".join(report.failures[:5])
    assert report.last_good_used + report.typed_errors == report.scenarios
    assert report.typed_errors >= 3 * 4  # every damaged state file except trailing whitespace


@pytest.fixture(scope="module")
def restartable(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Servers of their own (the session's are shared): persistent Redis, and Postgres."""
    servers: dict[str, Any] = {}
    binary, bin_dir = redis_binary(), postgres_bin_dir()
    if binary is not None:
        servers["redis"] = RedisServer(binary, persistent=True).start()
    if bin_dir is not None:
        servers["postgres"] = PostgresServer(bin_dir).start()
    yield servers
    for server in servers.values():
        server.close()


@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "backend",
    [
        "redis",
        "postgres",
    ],
)
def test_store_server_restarted_mid_save(
    backend: str, restartable: dict[str, Any], tmp_path: Path
) -> None:
    if backend not in restartable:
        pytest.skip(f"{backend} server not installed")
    server = restartable[backend]
    if backend == "redis":

        def store_for(sid: str) -> dict[str, Any]:
            return {"redis": {"url": server.url, "namespace": f"restart-{sid}"}}
    else:

        def store_for(sid: str) -> dict[str, Any]:
            return {"postgres": {"dsn": server.dsn(), "table": f"restart_{sid}"}}

    points = [(2, "before"), (7, "before"), (12, "after")]
    report = run_restarts(backend, tmp_path, store_for, server.pause, server.resume, points)
    _restarts[backend] = report
    print(
        "\n"
        + markdown(
            (
                "server restarted mid-save",
                "restarts",
                "completed by retry",
                "typed unavailable, then resumed",
                "diverged",
                "committed re-run",
            ),
            [
                (
                    r.backend,
                    r.restarts,
                    r.completed_by_retry,
                    r.typed_then_resumed,
                    r.diverged,
                    r.committed_rerun,
                )
                for r in _restarts.values()
            ],
        )
    )
    assert report.failures == [], "\n".join(report.failures[:5])
    assert report.restarts == len(points)
    assert report.completed_by_retry + report.typed_then_resumed == len(points)


@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["file", "redis", "postgres"])
def test_two_live_attempts_only_the_newer_commits(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    report = run_two_attempts(
        backend, tmp_path, backend_store_for(backend, request, tmp_path), [2, 6, 12]
    )
    _two[backend] = report
    print(
        "\n"
        + markdown(
            (
                "two live attempts",
                "scenarios",
                "older fenced (exit 12)",
                "tools run by the fenced attempt",
                "of which committed by the newer (idempotent, deduplicated)",
                "diverged",
                "committed re-run by the newer",
            ),
            [
                (
                    r.backend,
                    r.scenarios,
                    r.older_fenced,
                    r.fenced_executed,
                    r.fenced_reran_committed,
                    r.diverged,
                    r.committed_rerun,
                )
                for r in _two.values()
            ],
        )
    )
    assert report.failures == [], "\n".join(report.failures[:5])
    assert report.older_fenced == report.scenarios == 3
