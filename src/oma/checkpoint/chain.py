"""The records of a checkpoint journal that keeps its history: each one headed and chained.

A record is a header line, then the body a journal without history stores (a snapshot, or a
delta): ``{"seq":12,"prev":"…","sha":"…","at":…,"attempt":2,"kind":"delta","task":"…",
"what":"…"}\\n[…]``. ``seq`` numbers the run's boundaries (one per save, from 1, across
attempts; a base written in two records has its second as ``kind: "more"`` with the same
``seq``); ``sha`` is the digest of the record's own values (its header without ``sha``, then
its body: ``sealed``), so a changed record is found in the record itself; ``prev`` is the digest
of the whole record before it (``None`` for a journal's first record), so a record lost or moved
breaks the chain where it was, and ``oma.checkpoint.history`` names it. The journal's metadata
keeps the digest and ``seq`` of its last record, which has no successor to name it.

A record without a header (a journal written before histories, or with history off) starts
with its body; a body is compact JSON, which never holds a raw newline, and never starts with
``{"seq":`` (a snapshot starts with ``{"version":``).
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oma import jsonutil

HEADER_START = '{"seq":'
DIGEST_CHARS = 32  # 128 bits of sha256: finds any change; the chain is not a signature
Kind = Literal["base", "more", "delta"]


class RecordHeader(BaseModel):
    """What a record says of itself (``oma checkpoint history`` prints it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    seq: int = Field(ge=1)
    prev: str | None = Field(pattern=f"^[0-9a-f]{{{DIGEST_CHARS}}}$")
    sha: str = Field(pattern=f"^[0-9a-f]{{{DIGEST_CHARS}}}$", description="see ``sealed``")
    # Milliseconds since the epoch, the writer's clock; at most the end of year 9999.
    at: int = Field(ge=0, le=253_402_300_799_999)
    attempt: int | None = Field(ge=1)
    kind: Kind
    task: str | None = Field(default=None, max_length=256)
    what: str = Field(max_length=512)


def digest(record: str) -> str:
    """The digest the next record names: of the whole record, header and body."""
    return digest_of_bytes(encoded(record))


def encoded(record: str) -> bytes:
    """A record's bytes as its digest is taken (a lone surrogate kept, as JSON may hold one)."""
    return record.encode("utf-8", "surrogatepass")


def digest_of_bytes(raw: bytes) -> str:
    """``digest`` of a record already ``encoded``."""
    return hashlib.sha256(raw).hexdigest()[:DIGEST_CHARS]


def headed(header: RecordHeader, body: str) -> str:
    """The record: the header line, then ``body``."""
    return jsonutil.dumps(header.model_dump(mode="json")) + "\n" + body


def sealed(header: RecordHeader, body: str) -> str:
    """What ``header.sha`` is the digest of: every header value but ``sha``, then the body."""
    return digest(jsonutil.dumps(header.model_dump(mode="json", exclude={"sha"})) + "\n" + body)


def split(record: str) -> tuple[str | None, str]:
    """The header line (``None`` when the record has none) and the body."""
    if not record.startswith(HEADER_START):
        return None, record
    end = record.find("\n")
    if end < 0:
        return record, ""  # a header with no body: ``parse_header`` or the reader refuses it
    return record[:end], record[end + 1 :]


def body(record: str) -> str:
    """The record without its header (what a restore applies)."""
    return split(record)[1]


def parse_header(line: str) -> RecordHeader:
    """The header line, checked; ``ValueError`` saying what is wrong."""
    try:
        return RecordHeader.model_validate(jsonutil.loads(line))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'header'}: {error['msg']}"
            for error in exc.errors(include_url=False)[:3]
        )
        raise ValueError(f"its header is not valid ({problems})") from None
