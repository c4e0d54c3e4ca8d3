"""Process-wide operator settings and the one API client (set up by ``main``, used by handlers)."""

from __future__ import annotations

import os

from oma_operator.k8s.client import Kube

DEFAULT_IMAGE = os.environ.get("OMA_RUNNER_IMAGE", "ghcr.io/oma/oma:latest")
# A token-less service account for runner pods (the chart creates it in its namespace).
RUNNER_SERVICE_ACCOUNT = os.environ.get("OMA_RUNNER_SERVICE_ACCOUNT") or None
# Image pull secrets of runner pods (the chart's imagePullSecrets, comma-separated names).
RUNNER_IMAGE_PULL_SECRETS = tuple(
    name.strip()
    for name in os.environ.get("OMA_RUNNER_IMAGE_PULL_SECRETS", "").split(",")
    if name.strip()
)
# The port runner pods serve their metrics on (None: they serve none); set by ``main``.
RUNNER_METRICS_PORT: int | None = None
# The chart's tracing.otlpEndpoint: every runner pod's OTEL_EXPORTER_OTLP_ENDPOINT by default.
RUNNER_OTLP_ENDPOINT = os.environ.get("OMA_RUNNER_OTLP_ENDPOINT", "").strip()
# Which Events the operator posts ("notable" or "all", ``events.VERBOSITIES``); set by ``main``.
EVENTS = "notable"
# Whether the creator policy (the chart's approvals.creatorPolicy) records who created each
# TeamRun, so that its oma.dev/created-by annotation can be believed; set by ``main``.
CREATOR_RECORDED = False
LOG_FORMAT = "plain"  # the operator's (``--log-format``), and so its runner pods'
# The namespaces this operator watches (empty: every namespace); set by ``main``.
NAMESPACES: list[str] = []
# Set when the operator lets go of its runner pods on the way out: nothing tracks them again.
RELEASING = False


def _seconds(variable: str, default: float) -> float:
    text = os.environ.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        raise SystemExit(f"{variable}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise SystemExit(f"{variable}={text!r} must be more than 0 seconds")
    return value


# How often a running TeamRun's progress is read from its store into its status.
PROGRESS_SECONDS = _seconds("OMA_PROGRESS_SECONDS", 15.0)
# How long a store Secret's value is used before it is read again (a rotation shows by then).
SECRET_TTL_SECONDS = _seconds("OMA_SECRET_TTL_SECONDS", 60.0)


def _bytes(variable: str, default: int) -> int:
    text = os.environ.get(variable, "")
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise SystemExit(f"{variable}={text!r} must be a number of bytes, more than 0")
    return int(text)


# The largest snapshot-layout checkpoint the progress poll reads (a journal's head is always).
POLL_READ_LIMIT_BYTES = _bytes("OMA_POLL_READ_LIMIT_BYTES", 8 * 1024 * 1024)
_kube: Kube | None = None


async def connect() -> Kube:
    """Connect the one API client (idempotent): every entrypoint does before any call."""
    global _kube
    if _kube is None:
        try:
            _kube = await Kube.connect()
        except ValueError as exc:  # kr8s: no kubeconfig and no service account
            raise SystemExit(
                f"oma-operator: no Kubernetes credentials: {exc}. Run it in a pod with a service "
                "account, or point KUBECONFIG at a kubeconfig."
            ) from None
    return _kube


def kube() -> Kube:
    if _kube is None:
        raise RuntimeError("the API client is not connected: await runtime.connect() first")
    return _kube


async def close() -> None:
    global _kube
    if _kube is not None:
        await _kube.aclose()
        _kube = None
