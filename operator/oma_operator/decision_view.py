"""What a reviewer is shown of an ApprovalDecision before deciding it (pure).

The summary is words; ``spec.content`` is the exact content, the canonical JSON that
``spec.requestHash`` binds. It is checked against the hash here, so what is printed is what the
decision will bind to, whoever wrote the resource.
"""

from __future__ import annotations

import json
from typing import Any

from oma import jsonutil
from oma.approval.canonical import canonical_json
from oma.approval.errors import DurableApprovalError
from oma.approval.models import hash_approval_request


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


def view(decision: dict[str, Any], content: Any | None) -> list[str]:
    """Every line a reviewer reads: where it is, the whole summary, the exact content (when the
    resource holds it) and the hash."""
    meta, spec = decision["metadata"], decision.get("spec") or {}
    lines = [
        f"{meta['namespace']}/{meta['name']}: {spec.get('scope')} in TeamRun "
        f"{spec.get('teamRun')} (request {spec.get('requestId')})"
    ]
    hash_line = f"Content hash: {spec.get('requestHash')}"
    summary = [line for line in str(spec.get("summary") or "").splitlines() if line != hash_line]
    lines += [f"  {line}" for line in summary if line.strip()]
    reviewers = spec.get("reviewers")
    if reviewers:
        named = [
            *(reviewers.get("users") or []),
            *(f"group {g}" for g in reviewers.get("groups") or []),
        ]
        lines.append("  Reviewers: " + ", ".join(named))
    if content is not None:
        lines.append("  Exact content (checked against the hash):")
        pretty = json.dumps(content, ensure_ascii=False, indent=2, sort_keys=True)
        # A lone surrogate (legal in the content) cannot be printed: show its escape.
        pretty = pretty.encode("utf-8", "backslashreplace").decode("utf-8")
        lines += [f"    {line}" for line in pretty.splitlines()]
    lines.append(f"  {hash_line}")
    return lines
