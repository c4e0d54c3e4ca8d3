"""JSON from a model provider, read defensively: a model's output is untrusted input.

Three things the standard library accepts would hurt later, so they are refused here, where the
adapter can still turn them into an ``LLMResponseError``:

- ``NaN``/``Infinity`` (not JSON): a checkpoint would silently store them as ``null``;
- nesting so deep that ``json`` overflows the stack (a ``RecursionError``, not a ``ValueError``);
- tool input nested deeper than ``MAX_TOOL_INPUT_DEPTH``: it would land in the conversation and
  approval content of every later checkpoint, which could then no longer be written.
"""

from __future__ import annotations

import json
from typing import Any

from oma.jsonutil import nesting_depth

# Generous for any real tool schema, and well inside what a checkpoint can hold (the snapshot
# limit is oma.checkpoint.validation.MAX_SNAPSHOT_DEPTH; tool input sits about 8 levels down).
MAX_TOOL_INPUT_DEPTH = 64


class OutputJSONError(ValueError):
    """The text is not JSON the engine can use; the message says why."""


def loads(text: str | bytes) -> Any:
    """Parsed JSON; ``OutputJSONError`` for invalid JSON, non-finite numbers or deep nesting."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise OutputJSONError("nested too deeply to parse") from None
    except OutputJSONError:
        raise
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many integer digits
        raise OutputJSONError(str(err)) from None


def check_tool_input_depth(value: dict[str, Any]) -> None:
    nesting = nesting_depth(value)
    if nesting > MAX_TOOL_INPUT_DEPTH:
        raise OutputJSONError(
            f"tool input is nested {nesting} levels deep (at most {MAX_TOOL_INPUT_DEPTH})"
        )


def _refuse_constant(name: str) -> Any:
    raise OutputJSONError(f"{name} is not a JSON number")
