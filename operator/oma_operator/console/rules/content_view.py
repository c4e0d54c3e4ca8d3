"""A request's content as a reviewer reads it: one row per value, at its path, every string and
key shown with its hidden characters escaped (``oma.visible``), and the hash recomputed from
the very content the rows are made of.

The rows are made from ``request.content`` itself, never from a summary: the hash shown beside
them (``recomputed_hash``) is computed from the same object, so a page that shows a row shows
something the hash binds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from oma import jsonutil
from oma.approval.models import ApprovalRequest, hash_approval_request
from oma.visible import hides, visible, visible_json

Kind = Literal["string", "number", "boolean", "null", "object", "array"]
MAX_ROWS = 5000  # past this a page says how many more there are, and where to read them


@dataclass(frozen=True)
class Row:
    """One value: ``path`` (JSON-pointer-like, keys escaped), ``text`` (the value as shown,
    strings quoted as JSON does and escaped; an object or array shows its size), whether its
    value or its own key had anything escaped, and its depth (for indentation)."""

    path: str
    kind: Kind
    text: str
    escaped: bool
    depth: int


@dataclass(frozen=True)
class ContentView:
    rows: list[Row]
    hidden_rows: int  # rows past ``MAX_ROWS``, not shown
    escaped: bool  # any row escaped something: the page shows the legend


def recomputed_hash(request: ApprovalRequest) -> str:
    """The hash of what is displayed: scope, boundary and content as the request holds them.
    Equal to ``request.request_hash`` for every request the model accepted."""
    return hash_approval_request(request.scope, request.boundary, request.content)


def content_view(content: Any, limit: int = MAX_ROWS) -> ContentView:
    """Rows in document order (depth first, keys as stored), without recursion: content may
    nest as deep as the ledger allows."""
    rows: list[Row] = []
    total = 0
    escaped = False
    stack: list[tuple[str, Any, int, bool]] = [("", content, 0, False)]
    while stack:
        path, value, depth, key_hidden = stack.pop()
        row = _row(path, value, depth, key_hidden)
        total += 1
        escaped = escaped or row.escaped
        if len(rows) < limit:
            rows.append(row)
        children = _children(path, value, depth)
        stack.extend(reversed(children))
    return ContentView(rows, total - len(rows), escaped)


def _children(path: str, value: Any, depth: int) -> list[tuple[str, Any, int, bool]]:
    """Each child at its path, and whether its own key had a hidden character."""
    if isinstance(value, dict):
        return [
            (f"{path}/{path_key(key)}", item, depth + 1, hides(key)) for key, item in value.items()
        ]
    if isinstance(value, list):
        return [(f"{path}/{index}", item, depth + 1, False) for index, item in enumerate(value)]
    return []


def path_key(key: str) -> str:
    """A key in a path: JSON pointer escapes (``~0``, ``~1``) and hidden characters shown."""
    return visible(key.replace("~", "~0").replace("/", "~1"))


SHOWN_LIMIT = 2000  # characters of one value shown in a diff


def shown(value: Any) -> str:
    """A value in one line, as a diff shows it: JSON with hidden characters escaped (cut past
    ``SHOWN_LIMIT`` characters, saying so)."""
    text = visible_json(jsonutil.dumps(value))
    if len(text) <= SHOWN_LIMIT:
        return text
    return f"{text[:SHOWN_LIMIT]}… [{len(text) - SHOWN_LIMIT} more characters]"


def _row(path: str, value: Any, depth: int, path_escaped: bool) -> Row:
    shown_path = path or "/"
    if isinstance(value, dict):
        return Row(shown_path, "object", f"{{{len(value)} keys}}", path_escaped, depth)
    if isinstance(value, list):
        return Row(shown_path, "array", f"[{len(value)} items]", path_escaped, depth)
    if isinstance(value, str):
        text = '"' + visible(value.replace("\\", "\\\\").replace('"', '\\"')) + '"'
        return Row(shown_path, "string", text, path_escaped or hides(value), depth)
    if isinstance(value, bool):
        return Row(shown_path, "boolean", "true" if value else "false", path_escaped, depth)
    if value is None:
        return Row(shown_path, "null", "null", path_escaped, depth)
    # Numbers as the content holds them (an int stays an int, 1e400 was refused before here).
    return Row(shown_path, "number", repr(value), path_escaped, depth)
