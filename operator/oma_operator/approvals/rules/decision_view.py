"""What a reviewer is shown of an ApprovalDecision before deciding it (pure).

The summary is words; ``spec.content`` is the exact content, the canonical JSON that
``spec.requestHash`` binds. It is checked against the hash here, so what is printed is what the
decision will bind to, whoever wrote the resource. Every line shows control, bidi and
invisible characters escaped (``oma.visible``; a legend line says so), whoever wrote the
summary, and the content's numbers as its canonical JSON holds them.
"""

from __future__ import annotations

from typing import Any

from oma import jsonutil
from oma.approval.canonical import canonical_json, readable_json
from oma.approval.errors import DurableApprovalError
from oma.approval.models import hash_approval_request
from oma.visible import LEGEND, hides, hides_in, visible, visible_json
from oma_operator.resources.bodies import DecisionBody


class ContentMismatch(Exception):
    """The resource's content is not what its hash binds: nobody should decide on it."""


def verified_content(spec: dict[str, Any]) -> Any | None:
    """The resource's exact content, parsed, once checked against ``requestHash``; None when
    the resource holds none. Raises ``ContentMismatch`` when it does not hash to it."""
    text = spec.get("content")
    if text is None:
        return None
    try:
        content = jsonutil.loads(str(text))
        if canonical_json(content) != text:
            raise ContentMismatch("spec.content is not canonical JSON")
        computed = hash_approval_request(
            str(spec.get("scope")), str(spec.get("boundary") or ""), content
        )
    except (ValueError, RecursionError, DurableApprovalError) as exc:
        raise ContentMismatch(f"spec.content is not valid approval content: {exc}") from exc
    if computed != spec.get("requestHash"):
        raise ContentMismatch(
            f"spec.content hashes to {computed}, not to spec.requestHash {spec.get('requestHash')}"
        )
    return content


def view(decision: DecisionBody, content: Any | None) -> list[str]:
    """Every line a reviewer reads: where it is, the whole summary, the exact content (when the
    resource holds it), a legend when anything is shown escaped, and the hash, last."""
    meta, spec = decision["metadata"], decision.get("spec") or {}
    lines = [
        f"{meta['namespace']}/{meta['name']}: {spec.get('scope')} in TeamRun "
        f"{spec.get('teamRun')} (request {spec.get('requestId')})"
    ]
    hash_line = f"Content hash: {spec.get('requestHash')}"
    # Lines are split at newlines only: any other line break shows as its escape. The hash
    # line comes last, once: a summary's line naming another hash says it is the summary's.
    summary = [
        f"(the summary says) {line}" if line.lstrip().startswith("Content hash:") else line
        for line in str(spec.get("summary") or "").split("\n")
        if line.strip() and line not in (hash_line, LEGEND)
    ]
    escaped = LEGEND in str(spec.get("summary") or "")
    lines += [f"  {line}" for line in summary]
    reviewers = spec.get("reviewers")
    if reviewers:
        named = [
            *(reviewers.get("users") or []),
            *(f"group {g}" for g in reviewers.get("groups") or []),
        ]
        lines.append("  Reviewers: " + ", ".join(str(n) for n in named))
    escaped = escaped or any(hides(line) for line in [*lines, hash_line])
    lines = [visible(line) for line in lines]
    if content is not None:
        lines.append("  Exact content (checked against the hash):")
        pretty = readable_json(content, indent=2)
        escaped = escaped or hides_in(content)
        # Escaped as JSON escapes (a lone surrogate, legal in the content, too): still JSON.
        lines += [f"    {line}" for line in visible_json(pretty).split("\n")]
    if escaped:
        lines.append(f"  {LEGEND}")
    lines.append(f"  {visible(hash_line)}")
    return lines
