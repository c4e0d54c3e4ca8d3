"""Run metadata: a small, flat, JSON-safe map attached to a run and inherited on restore.

At most 32 entries; keys match ``[a-z0-9_.]{1,64}``; the ``oma.`` prefix is reserved for the
engine; values are strings (cut to 1024 characters, counted as JavaScript does: UTF-16 units),
finite numbers, booleans, or homogeneous arrays of those. ``_overridden`` is written by the
engine on restore and accepted only there.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_ENTRIES = 32
MAX_STRING = 1024
_KEY = re.compile(r"^[a-z0-9_.]{1,64}$")
OVERRIDDEN_KEY = "_overridden"


def validate_run_metadata(value: Any, *, allow_engine_keys: bool = False) -> dict[str, Any]:
    """The metadata to keep (``value`` with strings over 1024 characters cut, as the reference
    cuts them); raise ``ValueError`` saying why ``value`` is not valid run metadata."""
    if not isinstance(value, dict):
        raise ValueError("run metadata must be an object")
    if len(value) > MAX_ENTRIES:
        raise ValueError(f"run metadata has {len(value)} entries; at most {MAX_ENTRIES} allowed")
    for key, item in value.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"run metadata key {key!r} must match [a-z0-9_.]{{1,64}}")
        if key.startswith("oma."):
            raise ValueError(f"run metadata key {key!r} uses the reserved prefix 'oma.'")
        if key == OVERRIDDEN_KEY and not allow_engine_keys:
            raise ValueError(f"run metadata key {key!r} is reserved for the engine")
        _check_value(key, item)
    return {key: _cut(item) for key, item in value.items()}


def _cut(item: Any) -> Any:
    if isinstance(item, list):
        return [_cut(element) for element in item]
    if not isinstance(item, str) or len(item) <= MAX_STRING // 2:
        return item
    units = item.encode("utf-16-le", "surrogatepass")
    if len(units) <= 2 * MAX_STRING:
        return item
    # JavaScript's slice(0, 1024): 1024 UTF-16 units, which may end inside a surrogate pair.
    return units[: 2 * MAX_STRING].decode("utf-16-le", "surrogatepass")


def _check_value(key: str, item: Any) -> None:
    if _is_scalar(item):
        return
    if isinstance(item, list):
        kinds = {_scalar_kind(element) for element in item}
        if None in kinds or len(kinds) > 1:
            raise ValueError(f"run metadata {key!r}: arrays must hold scalars of one type")
        return
    raise ValueError(
        f"run metadata {key!r}: values must be strings, finite numbers, booleans or arrays of them"
    )


def _is_scalar(item: Any) -> bool:
    return _scalar_kind(item) is not None


def _scalar_kind(item: Any) -> str | None:
    if isinstance(item, bool):
        return "boolean"
    if isinstance(item, int | float):
        return "number" if math.isfinite(item) else None
    if isinstance(item, str):
        return "string"
    return None
