"""Task metadata (reference §3.1): a small flat map kept with a task, validated and redacted
where a task is made (a task list, a plan) and again where one is read back (a checkpoint).

At most 16 entries; keys ``[A-Za-z][A-Za-z0-9_.-]{0,63}``, none starting with ``oma.`` (any
case: the engine's) and none naming a credential (``api_key``, ``password``, ``token``...: the
names ``oma.redaction`` redacts); values are strings of at most 1024 characters, finite numbers,
booleans, or arrays of at most 16 scalars of one type. Credential text inside a string
(``password=hunter2``, a bearer token, a PEM key) is redacted, so the value kept is safe to store.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator

from oma.jsstring import utf16_length
from oma.redaction import is_sensitive_name, redact_text

MAX_ENTRIES = 16
MAX_ITEMS = 16
MAX_STRING = 1024
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def check_task_metadata(value: Any) -> dict[str, Any]:
    """The metadata to keep (credential text redacted); ``ValueError`` saying what is wrong."""
    if not isinstance(value, dict):
        raise ValueError("task metadata must be an object of key: value")
    if len(value) > MAX_ENTRIES:
        raise ValueError(f"task metadata has {len(value)} entries; at most {MAX_ENTRIES}")
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"task metadata key {key!r} must match [A-Za-z][A-Za-z0-9_.-]{{0,63}}")
        if key.lower().startswith("oma."):
            raise ValueError(f"task metadata key {key!r} uses the engine's reserved prefix 'oma.'")
        if is_sensitive_name(key):
            raise ValueError(
                f"task metadata key {key!r} names a credential: keep secrets out of task metadata"
            )
        kept[key] = _checked(key, item)
    return kept


def _checked(key: str, item: Any) -> Any:
    if isinstance(item, list):
        if len(item) > MAX_ITEMS:
            raise ValueError(f"task metadata {key!r}: {len(item)} items; at most {MAX_ITEMS}")
        kinds = {_kind(element) for element in item}
        if None in kinds or len(kinds) > 1:
            raise ValueError(f"task metadata {key!r}: an array holds scalars of one type")
        return [_scalar(key, element) for element in item]
    if _kind(item) is None:
        raise ValueError(
            f"task metadata {key!r}: a value is a string, a finite number, a boolean or an "
            "array of them (no nested objects)"
        )
    return _scalar(key, item)


def _scalar(key: str, item: Any) -> Any:
    if not isinstance(item, str):
        return item
    length = utf16_length(item)  # as JavaScript counts (an emoji is 2)
    if length > MAX_STRING:
        raise ValueError(f"task metadata {key!r}: {length} characters; at most {MAX_STRING}")
    return redact_text(item)


def _kind(item: Any) -> str | None:
    if isinstance(item, bool):
        return "boolean"
    if isinstance(item, int | float):
        return "number" if math.isfinite(item) else None
    return "string" if isinstance(item, str) else None


# A model field of task metadata: checked (and redacted) whenever the model is validated.
TaskMetadata = Annotated[dict[str, Any], AfterValidator(check_task_metadata)]
