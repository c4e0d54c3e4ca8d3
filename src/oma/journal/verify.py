"""``verify_run``: an offline check of a run journal, answering as the reference's
``verifyRun()`` does (its ``src/journal/verify.ts``).

Three answers: ``ok`` (no failure), ``failures`` (what the journal shows to be wrong) and
``inconclusive`` (what it cannot show either way, because the events it names are not in the
readable window). Three checks, in order: every ``seq`` greater than the one before (gaps are
fine); every reference (``sourceEventSeqs``, a ``context/replace``'s dropped range and each
replacement) to an earlier event; and each block of each ``llm/request`` reproduced by an event
it names: the canonical-JSON hash of a block of a message event, or of a replacement block of a
``context/replace``, equal to the block's ``contentHash``. It does not pair turns or require a
``run/end``: a crashed run verifies like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from oma.approval.canonical import canonical_json, sha256_hex
from oma.approval.errors import DurableApprovalError
from oma.errors import OmaError
from oma.journal.events import MESSAGE_EVENTS


class JournalShapeError(OmaError):
    """An event whose payload is not what its type carries (blocks that are not block
    descriptors, references that are not lists): the journal cannot be checked."""

    code = "JOURNAL_UNREADABLE"


FailureCode = Literal["MISSING_CONTEXT_REPLACE", "SEQ_NOT_MONOTONIC", "BROKEN_LINK"]
FailureReason = Literal[
    "no-lineage",
    "not-reproducible",
    "duplicate-sequence",
    "out-of-order-sequence",
    "forward-reference",
]


@dataclass(frozen=True)
class VerifyRunFailure:
    """What the journal shows to be wrong: its code and reason, the event (``seq``) and, for
    a request's block, its place."""

    code: FailureCode
    reason: FailureReason
    detail: str
    seq: int | None = None
    message_index: Any = None  # as the journal wrote it
    block_index: Any = None


@dataclass(frozen=True)
class VerifyRunGap:
    """What the journal cannot settle: the events ``seq`` names that the readable window
    does not hold (``missing_seqs``)."""

    seq: int
    missing_seqs: list[Any]
    detail: str
    message_index: Any = None
    block_index: Any = None


@dataclass
class VerifyRunResult:
    """``verify_run``'s answer: ``ok`` (no failure), the failures, the gaps, and what was
    checked."""

    failures: list[VerifyRunFailure] = field(default_factory=list)
    inconclusive: list[VerifyRunGap] = field(default_factory=list)
    events: int = 0
    requests: int = 0
    blocks_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_wire(self) -> dict[str, Any]:
        """The reference's ``VerifyRunResult`` shape (camelCase, absent fields left out)."""
        return {
            "ok": self.ok,
            "failures": [_wire(f) for f in self.failures],
            "inconclusive": [_wire(g) for g in self.inconclusive],
            "stats": {
                "events": self.events,
                "requests": self.requests,
                "blocksChecked": self.blocks_checked,
            },
        }


def verify_run(events: list[dict[str, Any]]) -> VerifyRunResult:
    """Check ``events`` (in the order read) as the reference's ``verifyRun()`` does."""
    result = VerifyRunResult(events=len(events))
    by_seq: dict[int, dict[str, Any]] = {}
    previous: int | None = None
    for event in events:
        seq = event["seq"]
        if previous is not None and seq <= previous:
            duplicate = seq == previous  # an older one again is out of order, as the reference says
            result.failures.append(
                VerifyRunFailure(
                    "SEQ_NOT_MONOTONIC",
                    "duplicate-sequence" if duplicate else "out-of-order-sequence",
                    f"Sequence {seq} appears more than once."
                    if duplicate
                    else f"Sequence {seq} follows {previous}.",
                    seq=seq,
                )
            )
        by_seq.setdefault(seq, event)  # a duplicated seq: the first one stands
        previous = seq
    for event in events:
        _check_links(event, by_seq, result)
    for event in events:
        if event.get("type") == "llm/request":
            result.requests += 1
            _check_blocks(event, by_seq, result)
    return result


def _check_links(
    event: dict[str, Any], by_seq: dict[int, dict[str, Any]], result: VerifyRunResult
) -> None:
    seq = event["seq"]
    named: list[tuple[str, Any]] = [(f"Event {seq}", event.get("sourceEventSeqs"))]
    if event.get("type") == "context/replace":
        dropped = event.get("dropped")
        if isinstance(dropped, dict):
            named.append((f"Event {seq} dropped range", dropped.get("sourceEventSeqs")))
        for index, replacement in enumerate(event.get("replacements") or []):
            if isinstance(replacement, dict):
                named.append(
                    (f"Event {seq} replacement {index}", replacement.get("sourceEventSeqs"))
                )
    for what, named_refs in named:
        refs = _refs(named_refs, what)
        if refs is None:
            continue
        forward, missing = _split(refs, seq, by_seq)
        if forward:
            result.failures.append(
                VerifyRunFailure(
                    "BROKEN_LINK",
                    "forward-reference",
                    f"{what} names {_listed(forward)}, which cannot precede event {seq}.",
                    seq=seq,
                )
            )
        if missing:
            result.inconclusive.append(
                VerifyRunGap(
                    seq,
                    missing,
                    f"{what} names {_listed(missing)}, which the readable window does not contain.",
                )
            )


def _check_blocks(
    request: dict[str, Any], by_seq: dict[int, dict[str, Any]], result: VerifyRunResult
) -> None:
    seq = request["seq"]
    blocks = request.get("blocks")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise JournalShapeError(f"Request {seq}: blocks is not a list of block descriptors")
    for block in blocks:
        result.blocks_checked += 1
        m, b = block.get("messageIndex"), block.get("blockIndex")
        where = (
            f"Request {seq} block at message {_js(m)}, block {_js(b)} "
            f"({_js(block.get('blockType'))})"
        )
        refs = _refs(block.get("sourceEventSeqs"), where)
        if refs is None:
            result.failures.append(
                VerifyRunFailure(
                    "MISSING_CONTEXT_REPLACE",
                    "no-lineage",
                    f"{where} records no lineage, so nothing in the journal explains what the "
                    "model saw.",
                    seq=seq,
                    message_index=m,
                    block_index=b,
                )
            )
            continue
        forward, missing = _split(refs, seq, by_seq)
        if forward:
            result.failures.append(
                VerifyRunFailure(
                    "BROKEN_LINK",
                    "forward-reference",
                    f"{where} names {_listed(forward)}, which cannot precede event {seq}.",
                    seq=seq,
                    message_index=m,
                    block_index=b,
                )
            )
        found = [
            by_seq[n] for r in refs if (n := _seq_of(r)) is not None and n < seq and n in by_seq
        ]
        wanted = block.get("contentHash")
        if isinstance(wanted, str) and any(wanted in _reproduced(event) for event in found):
            continue
        if missing:
            result.inconclusive.append(
                VerifyRunGap(
                    seq,
                    missing,
                    f"{where} names {_listed(missing)}, which the readable window does not "
                    "contain.",
                    message_index=m,
                    block_index=b,
                )
            )
        elif not forward:
            result.failures.append(
                VerifyRunFailure(
                    "MISSING_CONTEXT_REPLACE",
                    "not-reproducible",
                    f"{where} names {_listed(refs)}, and none of those events reproduces its "
                    "content.",
                    seq=seq,
                    message_index=m,
                    block_index=b,
                )
            )


def _reproduced(event: dict[str, Any]) -> set[str]:
    """The content hashes of the blocks ``event`` carries (none for other event types)."""
    blocks: list[Any] = []
    if event.get("type") in MESSAGE_EVENTS:
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        blocks = content if isinstance(content, list) else []
    elif event.get("type") == "context/replace":
        replacements = event.get("replacements")
        listed = replacements if isinstance(replacements, list) else []
        blocks = [r.get("block") for r in listed if isinstance(r, dict)]
    return {h for h in (content_hash(block) for block in blocks) if h}


def content_hash(block: Any) -> str | None:
    """The reference's ``canonicalContentHash``: sha256 of the block's canonical JSON (keys
    sorted by UTF-16 code units, JavaScript's number forms), or None for a value JSON cannot
    hold."""
    try:
        text = canonical_json(block)
    except DurableApprovalError:
        return None
    return sha256_hex(text)


def _listed(seqs: list[Any]) -> str:
    return ", ".join(_js(s) for s in seqs)


def _js(value: Any) -> str:
    """A value in a detail as JavaScript writes it in a template string."""
    if value is None:
        return "null"
    if value is True or value is False:
        return str(value).lower()
    if type(value) is float and value.is_integer():
        return str(int(value))
    return str(value)


def _seq_of(ref: Any) -> int | None:
    """A reference as the event sequence number it names (``2.0`` is 2), or None when it
    names none (a string, a bool: such a reference is reported as missing)."""
    if type(ref) is int or (type(ref) is float and ref.is_integer()):
        return int(ref)
    return None


def _split(refs: list[Any], seq: int, by_seq: dict[int, Any]) -> tuple[list[Any], list[Any]]:
    """``refs`` that point forward (at or after ``seq``), and those not in the window."""
    forward = [r for r in refs if (n := _seq_of(r)) is not None and n >= seq]
    missing = [r for r in refs if (n := _seq_of(r)) is None or (n < seq and n not in by_seq)]
    return forward, missing


def _refs(value: Any, where: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise JournalShapeError(f"{where}: sourceEventSeqs is not a list")
    return value


def _wire(item: VerifyRunFailure | VerifyRunGap) -> dict[str, Any]:
    """In the reference's key order, leaving out what it leaves undefined."""
    keys: tuple[str, ...]
    if isinstance(item, VerifyRunFailure):
        keys = ("code", "reason", "seq", "message_index", "block_index", "detail")
        optional = {"seq", "message_index", "block_index"}
    else:
        keys = ("seq", "missing_seqs", "message_index", "block_index", "detail")
        optional = {"message_index", "block_index"}
    names = {"missing_seqs": "missingSeqs", "message_index": "messageIndex"}
    names["block_index"] = "blockIndex"
    return {
        names.get(key, key): getattr(item, key)
        for key in keys
        if not (key in optional and getattr(item, key) is None)
    }
