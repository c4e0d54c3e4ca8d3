"""The operator's settings as one immutable object, read once at its start.

``main`` builds it from its flags and the environment (``Settings.read``) before anything runs:
a bad value stops the operator there, naming the variable and what to write instead, rather
than at the first run that needs it. Nothing changes it afterwards; it is handed to the
services at start (``main``) and read by the handlers through ``runtime.settings()``. The pure
rules are given the part they need (``runner_pod`` a ``RunnerPodSettings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from oma_operator.settings.limits import Limits
from oma_operator.settings.values import (
    boolean,
    byte_count,
    count,
    names,
    rate,
    seconds,
    time_to_live,
)

DEFAULT_RUNNER_IMAGE = "ghcr.io/oma/oma:latest"
Verbosity = Literal["notable", "all"]
VERBOSITIES: tuple[Verbosity, ...] = ("notable", "all")


@dataclass(frozen=True)
class RunnerPodSettings:
    """What every runner pod the operator creates gets, whatever its TeamRun says."""

    image: str = DEFAULT_RUNNER_IMAGE  # OMA_RUNNER_IMAGE (the chart: image.repository/tag)
    # A token-less service account (the chart creates it in its namespace); None: the default.
    service_account: str | None = None  # OMA_RUNNER_SERVICE_ACCOUNT
    image_pull_secrets: tuple[str, ...] = ()  # OMA_RUNNER_IMAGE_PULL_SECRETS, comma-separated
    metrics_port: int | None = None  # --runner-metrics-port; None: the pods serve no metrics
    # Every runner pod's OTEL_EXPORTER_OTLP_ENDPOINT unless its TeamRun sets one; "": none.
    otlp_endpoint: str = ""  # OMA_RUNNER_OTLP_ENDPOINT (the chart: tracing.otlpEndpoint)
    log_format: str = "plain"  # --log-format: the operator's, and so its runner pods'


@dataclass(frozen=True)
class Settings:
    """Everything the operator was configured with; ``Settings()`` is its defaults."""

    runner: RunnerPodSettings = field(default_factory=RunnerPodSettings)
    namespaces: tuple[str, ...] = ()  # --namespace; empty: every namespace
    events: Verbosity = "notable"  # --events: which Events are posted
    # --creator-policy installed: the API server wrote each TeamRun's oma.dev/created-by, so
    # separation of duties may believe it.
    creator_recorded: bool = False
    progress_seconds: float = 15.0  # OMA_PROGRESS_SECONDS: how often a run's store is polled
    # OMA_SECRET_TTL_SECONDS: how long a store Secret's value is used before it is read again.
    secret_ttl_seconds: float = 60.0
    # OMA_POLL_READ_LIMIT_BYTES: the largest snapshot checkpoint the progress poll reads.
    poll_read_limit_bytes: int = 8 * 1024 * 1024
    limits: Limits = field(default_factory=Limits)  # OMA_MAX_RUNNING_PER_NAMESPACE/_PROVIDER
    # OMA_TTL_SECONDS_AFTER_FINISHED: a finished TeamRun's default time to live; None: kept.
    finished_ttl_seconds: int | None = None
    # OMA_DELETE_STORE_RECORDS: a TeamRun deleted for its time to live takes its records along.
    delete_store_records: bool = False
    # OMA_API_QPS, OMA_API_BURST: the operator's rate limit on its API requests (k8s.ratelimit).
    # At 4 requests per run (5 queued) 100/s lets one operator start and end 1,200-1,500 runs
    # a minute; a burst of 200 lets a few dozen runs start at once without waiting.
    api_qps: float = 100.0
    api_burst: int = 200

    @classmethod
    def read(
        cls,
        env: Mapping[str, str],
        *,
        namespaces: tuple[str, ...] = (),
        events: Verbosity = "notable",
        creator_recorded: bool = False,
        log_format: str = "plain",
        runner_metrics_port: int | None = None,
    ) -> Settings:
        """The settings from the flags ``main`` parsed and the variables only the environment
        sets; raises ``SettingsError`` naming the first bad variable."""
        defaults = cls()
        return cls(
            runner=RunnerPodSettings(
                image=env.get("OMA_RUNNER_IMAGE", "").strip() or DEFAULT_RUNNER_IMAGE,
                service_account=env.get("OMA_RUNNER_SERVICE_ACCOUNT", "").strip() or None,
                image_pull_secrets=names(env.get("OMA_RUNNER_IMAGE_PULL_SECRETS", "")),
                metrics_port=runner_metrics_port or None,
                otlp_endpoint=env.get("OMA_RUNNER_OTLP_ENDPOINT", "").strip(),
                log_format=log_format,
            ),
            namespaces=namespaces,
            events=events,
            creator_recorded=creator_recorded,
            progress_seconds=seconds(
                "OMA_PROGRESS_SECONDS",
                env.get("OMA_PROGRESS_SECONDS", ""),
                defaults.progress_seconds,
            ),
            secret_ttl_seconds=seconds(
                "OMA_SECRET_TTL_SECONDS",
                env.get("OMA_SECRET_TTL_SECONDS", ""),
                defaults.secret_ttl_seconds,
            ),
            poll_read_limit_bytes=byte_count(
                "OMA_POLL_READ_LIMIT_BYTES",
                env.get("OMA_POLL_READ_LIMIT_BYTES", ""),
                defaults.poll_read_limit_bytes,
            ),
            limits=Limits.from_env(env),
            finished_ttl_seconds=time_to_live(
                "OMA_TTL_SECONDS_AFTER_FINISHED", env.get("OMA_TTL_SECONDS_AFTER_FINISHED", "")
            ),
            delete_store_records=boolean(
                "OMA_DELETE_STORE_RECORDS", env.get("OMA_DELETE_STORE_RECORDS", "")
            ),
            api_qps=rate("OMA_API_QPS", env.get("OMA_API_QPS", ""), defaults.api_qps),
            api_burst=count("OMA_API_BURST", env.get("OMA_API_BURST", ""), defaults.api_burst),
        )
