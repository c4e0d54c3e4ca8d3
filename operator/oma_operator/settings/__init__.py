"""The operator's settings: one immutable object built at its start (``Settings.read``)."""

from oma_operator.settings.limits import Limits, LimitsError
from oma_operator.settings.operator import (
    DEFAULT_RUNNER_IMAGE,
    VERBOSITIES,
    RunnerPodSettings,
    Settings,
    Verbosity,
)
from oma_operator.settings.values import SettingsError

__all__ = [
    "DEFAULT_RUNNER_IMAGE",
    "VERBOSITIES",
    "Limits",
    "LimitsError",
    "RunnerPodSettings",
    "Settings",
    "SettingsError",
    "Verbosity",
]
