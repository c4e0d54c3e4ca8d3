"""The operator process's state: its settings (installed once by ``main``), its one API
client, and whether it is letting go of its runner pods on the way out."""

from __future__ import annotations

from oma_operator.k8s.client import Kube
from oma_operator.settings import Settings

_settings = Settings()
# Set when the operator lets go of its runner pods on the way out: nothing tracks them again.
RELEASING = False


def configure(settings: Settings) -> None:
    """Install the settings ``main`` read; before it, ``settings()`` gives the defaults."""
    global _settings
    _settings = settings


def settings() -> Settings:
    """The operator's settings (immutable: a change means a restart)."""
    return _settings


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
