"""What a TeamRun may add to its runner pods: labels, annotations and a scratch volume.

Keys are Kubernetes qualified names; keys under ``oma.dev/`` are the operator's (it finds,
tracks and times runner pods by them) and are refused, by the API server (a CEL rule in the
CRD) and again here. Label values are checked by the CRD's pattern; the syntax of keys by the
operator when it reads the TeamRun (``InvalidSpec`` before any pod), as the API server would
when the pod is created.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator

from oma.spec import SpecModel

RESERVED_PREFIX = "oma.dev/"
SCRATCH_PATH = "/scratch"
MAX_ENTRIES = 32
# A qualified name: an optional DNS subdomain prefix and "/", then 1-63 characters.
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
QUALIFIED_KEY = rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
_KEY = re.compile(QUALIFIED_KEY)
_VALUE = re.compile(LABEL_VALUE)
# Only the prefix in CEL: a regular expression over keys of unbounded length would exceed the
# API server's cost budget for a rule; the operator checks the syntax when it reads the spec.
_MAP_RULES = [
    {
        "rule": f"self.all(k, !k.startsWith('{RESERVED_PREFIX}'))",
        "message": f"keys under {RESERVED_PREFIX} are the operator's",
    },
]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
AnnotationValue = Annotated[str, Field(max_length=4096)]
Labels = Annotated[
    dict[str, LabelValue],
    Field(max_length=MAX_ENTRIES, json_schema_extra={"x-kubernetes-validations": _MAP_RULES}),
]
Annotations = Annotated[
    dict[str, AnnotationValue],
    Field(max_length=MAX_ENTRIES, json_schema_extra={"x-kubernetes-validations": _MAP_RULES}),
]
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


def check_keys(entries: dict[str, str] | None, what: str) -> dict[str, str] | None:
    for key in entries or {}:
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(f"{what} key {key!r}: keys under {RESERVED_PREFIX} are the operator's")
        if not _KEY.fullmatch(key):
            raise ValueError(f"{what} key {key!r} is not a Kubernetes qualified name")
    return entries


def check_label_values(labels: dict[str, str] | None) -> dict[str, str] | None:
    for key, value in (labels or {}).items():
        if not _VALUE.fullmatch(value):
            raise ValueError(f"label {key!r}: {value!r} is not a Kubernetes label value")
    return labels


class ScratchVolume(SpecModel):
    """A writable directory for the runner's tools (the root filesystem is read-only): an
    ``emptyDir`` at ``/scratch`` (``$OMA_SCRATCH_DIR``), gone with the pod, so nothing durable
    may live there."""

    model_config = ConfigDict(extra="forbid")

    size_limit: str = Field(
        default="1Gi",
        pattern=QUANTITY,
        max_length=32,
        description="Most it may hold (a Kubernetes quantity, e.g. 512Mi); the kubelet evicts the "
        "pod beyond it.",
    )
    medium: str | None = Field(
        default=None,
        pattern=r"^Memory$",
        description="Memory: a tmpfs (counts against the container's memory); default: node disk.",
    )

    @field_validator("size_limit")
    @classmethod
    def _positive(cls, size: str) -> str:
        if float(re.sub(r"[A-Za-z]+$", "", size)) <= 0:
            raise ValueError("sizeLimit must be more than 0")
        return size
