"""Rich tool results: what a tool shows the model as parts (text, image, file), not one string.

Here, with the conversation's types, because the adapters translate the parts too.

The parts are the reference's: ``{"type": "text", "text"}``, ``{"type": "image", "source"}`` and
``{"type": "file", "filename", "source"}``, where a source is ``{"type": "base64", "media_type",
"data"}`` or ``{"type": "url", "media_type", "url"}``. They are checked here once, when the tool
returns them (a tool's bad parts become an error result the model sees, as any tool failure),
and stored as they are in the conversation and in the call's commit. The call's record (and so
traces and ``oma checkpoint show``) keeps a text view without the bytes or the URLs.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

RichContent = str | list[dict[str, Any]]

_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class RichContentError(ValueError):
    """A tool returned parts the model cannot be shown; the message names the part."""


def check_parts(value: str | Sequence[Any], path: str = "model_output") -> RichContent:
    """A checked copy of ``value`` (a string, or a non-empty list of parts)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise RichContentError(f"{path} must be a string or a list of parts, not {_kind(value)}")
    if not value:
        raise RichContentError(f"{path} must not be an empty list of parts")
    return [_part(part, f"{path}[{index}]") for index, part in enumerate(value)]


# The image types both providers take in a request; any other is described, not sent.
SENDABLE_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
LEFT_OUT = "[a part that is not a valid text, image or file part was left out]"


def sendable_parts(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of a tool result as an adapter may send them: each checked again (a part
    restored from a checkpoint was never checked here), a part that fails the check replaced
    by a note saying so, an image of a type no provider takes by its text view, empty text
    parts dropped (the APIs refuse empty text blocks)."""
    sent: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        try:
            checked = _part(part, f"content[{index}]")
        except RichContentError:
            sent.append({"type": "text", "text": LEFT_OUT})
            continue
        if checked["type"] == "text" and not checked["text"]:
            continue
        if checked["type"] == "image" and checked["source"]["media_type"] not in (
            SENDABLE_IMAGE_TYPES
        ):
            note = f"{part_text(checked)} (not shown: images are sent as JPEG, PNG, GIF or WebP)"
            sent.append({"type": "text", "text": note})
            continue
        sent.append(checked)
    return sent


def summary_text(content: RichContent) -> str:
    """The text view kept in the call's record: text parts exactly, media as a placeholder."""
    if isinstance(content, str):
        return content
    return "\n".join(part_text(part) for part in content)


def has_media(content: RichContent) -> bool:
    return not isinstance(content, str) and any(p.get("type") != "text" for p in content)


def _part(part: Any, path: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise RichContentError(f"{path} must be a part object, not {_kind(part)}")
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise RichContentError(f"{path}.text must be a string")
        return {"type": "text", "text": part["text"]}
    if kind == "image":
        return {"type": "image", "source": _source(part.get("source"), f"{path}.source")}
    if kind == "file":
        filename = _non_empty(part.get("filename"), f"{path}.filename")
        return {
            "type": "file",
            "filename": filename,
            "source": _source(part.get("source"), f"{path}.source"),
        }
    raise RichContentError(f'{path}.type must be "text", "image" or "file", not {kind!r:.40}')


def _source(source: Any, path: str) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise RichContentError(f"{path} must be a media source object, not {_kind(source)}")
    media_type = _non_empty(source.get("media_type"), f"{path}.media_type")
    if not _MEDIA_TYPE.fullmatch(media_type):
        raise RichContentError(f"{path}.media_type must be a MIME type without parameters")
    if source.get("type") == "base64":
        data = _canonical_base64(_non_empty(source.get("data"), f"{path}.data"))
        if data is None:
            raise RichContentError(f"{path}.data must be base64 (not a data: URL, no spaces)")
        return {"type": "base64", "media_type": media_type, "data": data}
    if source.get("type") == "url":
        url = _non_empty(source.get("url"), f"{path}.url")
        parts = urlsplit(url)
        # urlsplit drops surrounding blanks and control characters; the URL sent would not.
        if any(c <= " " or c == "\x7f" for c in url):
            raise RichContentError(f"{path}.url must not hold spaces or control characters")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RichContentError(f"{path}.url must be an absolute http(s) URL")
        return {"type": "url", "media_type": media_type, "url": url}
    raise RichContentError(f'{path}.type must be "base64" or "url"')


def _canonical_base64(data: str) -> str | None:
    """``data`` as standard padded base64, or ``None`` unless it is base64 whose bytes encode
    back to the same text (padding aside): what the reference accepts, sent as every decoder
    takes it (``AAA`` becomes ``AAA=``)."""
    if len(data) % 4 == 1 or not _BASE64.fullmatch(data):
        return None
    unpadded = data.rstrip("=")
    try:
        decoded = base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    canonical = base64.b64encode(decoded).decode()
    return canonical if unpadded and canonical.rstrip("=") == unpadded else None


def _non_empty(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RichContentError(f"{path} must be a non-empty string")
    return value


def part_text(part: dict[str, Any]) -> str:
    """One part's text view: a text part's text, a placeholder for media."""
    if part.get("type") == "text":
        return str(part.get("text", ""))
    source = part.get("source") or {}
    where = "inline data" if source.get("type") == "base64" else "URL reference"
    media = source.get("media_type", "")
    if part.get("type") == "image":
        return f"[image: {media}; {where}]"
    return f"[file: {part.get('filename', '')}; {media}; {where}]"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
