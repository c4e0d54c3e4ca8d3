"""What an ``llm/request`` event says the model was shown: one descriptor per block of each
message (its place, role and type, the events that produced it, and its content hash), which
``verify_run`` checks against those events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oma.approval.canonical import canonical_json, sha256_hex
from oma.errors import OmaError
from oma.journal.verify import content_hash

Lineage = list[list[int] | None]  # per block of one message: the events that produced it


class JournalLineageError(OmaError):
    """A request would show the model a block no journal event explains (``enforceLineage``):
    refused before the model is called."""

    code = "MISSING_CONTEXT_REPLACE"
    transient = False

    def __init__(self, message: str, *, message_index: int, block_index: int, block_type: str):
        super().__init__(message)
        self.message_index = message_index
        self.block_index = block_index
        self.block_type = block_type


def block_descriptors(
    messages: Sequence[dict[str, Any]], lineage: Sequence[Lineage], *, start: int = 0
) -> list[dict[str, Any]]:
    """The ``blocks`` of an ``llm/request`` showing ``messages`` (wire form), whose blocks
    come from the events ``lineage`` names (positionally: per message, per block); ``start``:
    the conversation index of ``messages[0]`` (a request's later messages only)."""
    found = []
    for m, message in enumerate(messages, start=start):
        sources = lineage[m] if m < len(lineage) else []
        for b, block in enumerate(message.get("content") or []):
            seqs = sources[b] if b < len(sources) else None
            found.append(
                {
                    "messageIndex": m,
                    "blockIndex": b,
                    "role": message.get("role"),
                    "blockType": block.get("type") if isinstance(block, dict) else None,
                    "sourceEventSeqs": list(seqs) if seqs is not None else None,
                    "contentHash": content_hash(block),
                }
            )
    return found


def enforce_lineage(blocks: Sequence[dict[str, Any]]) -> None:
    """``JournalLineageError`` for the first block no event explains."""
    for block in blocks:
        if block["sourceEventSeqs"] is None:
            m, b, kind = block["messageIndex"], block["blockIndex"], str(block["blockType"])
            raise JournalLineageError(
                f"message {m}, block {b} ({kind}) has no journal lineage (it was restored from "
                "a checkpoint written without a journal): nothing in the journal explains what "
                "the model would see. Resume with enforce_lineage off, or start the run again.",
                message_index=m,
                block_index=b,
                block_type=kind,
            )


def json_hash(value: Any) -> str:
    """The reference's ``canonicalJsonHash`` (``systemPromptHash``, ``toolsHash``)."""
    return sha256_hex(canonical_json(value))
