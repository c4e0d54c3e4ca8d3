"""Concurrency limits as settings: how many TeamRuns may run at once per namespace and per
model provider (``OMA_MAX_RUNNING_PER_NAMESPACE``, ``OMA_MAX_RUNNING_PER_PROVIDER``).

What they mean for a run is in ``runs.rules.concurrency``; this module only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import get_args

from oma.spec import ModelSpec
from oma_operator.settings.values import SettingsError

PROVIDERS: tuple[str, ...] = get_args(ModelSpec.model_fields["provider"].annotation)
NAMESPACE_VARIABLE = "OMA_MAX_RUNNING_PER_NAMESPACE"
PROVIDER_VARIABLE = "OMA_MAX_RUNNING_PER_PROVIDER"


class LimitsError(SettingsError):
    """A limit setting that cannot be used; the message says which and how to write it."""


@dataclass(frozen=True)
class Limits:
    """``per_namespace`` None: no limit; ``per_provider`` lists only limited providers."""

    per_namespace: int | None = None
    per_provider: Mapping[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.per_namespace is not None or bool(self.per_provider)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        return cls(
            per_namespace=_namespace_limit(env.get(NAMESPACE_VARIABLE, "").strip()),
            per_provider=_provider_limits(env.get(PROVIDER_VARIABLE, "").strip()),
        )

    def describe(self) -> str:
        parts = [f"{self.per_namespace} per namespace"] if self.per_namespace else []
        parts += [f"{n} using {p}" for p, n in sorted(self.per_provider.items())]
        return ", ".join(parts) or "none"


def _namespace_limit(text: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise LimitsError(
            f"{NAMESPACE_VARIABLE}={text!r} is not a whole number (0 or unset: no limit)"
        ) from None
    if value < 0:
        raise LimitsError(f"{NAMESPACE_VARIABLE}={text!r} is negative (0 or unset: no limit)")
    return value or None


def _provider_limits(text: str) -> dict[str, int]:
    """``anthropic=20,openai=10``: each provider named at most once, each limit at least 1."""
    limits: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        provider, sep, number = (piece.strip() for piece in item.partition("="))
        where = f"{PROVIDER_VARIABLE}: {item!r}"
        if not sep or provider not in PROVIDERS:
            raise LimitsError(
                f"{where} is not PROVIDER=N with PROVIDER one of {', '.join(PROVIDERS)} "
                "(e.g. anthropic=20,openai=10)"
            )
        if provider in limits:
            raise LimitsError(f"{where}: {provider} is limited twice")
        try:
            value = int(number)
        except ValueError:
            raise LimitsError(f"{where}: {number!r} is not a whole number") from None
        if value < 1:
            raise LimitsError(
                f"{where}: the limit must be at least 1 (leave a provider out to not limit it)"
            )
        limits[provider] = value
    return limits
