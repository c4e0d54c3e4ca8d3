"""Strict load-time validation of snapshots (reference §2.6), one error per violated rule.

Every problem is reported with its JSON path and the rule it broke:

- 2.6.1 root shape: version 1-5, mode, createdAt, completedTaskResults, run metadata, v5's
  journalWatermarkSeq (an integer >= 0) and journalRef ({kind, path?})
- 2.6.2 v2+: identity {runId, attempt >= 1, lastTraceId, lastRootSpanId}
- 2.6.3 v3+: in-flight tasks (unique ids, phase and its fields, usage, turns, records)
- 2.6.4 v3+: pending tool calls (call shape, commits bound to their call, approvals)
- 2.6.5 v4: pending approvals and decisions (integrity, same run, unique, cross-listed)
- 2.6.6 queue: version 1 or 2, tasks, plan revisions
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from oma.checkpoint.snapshot import SNAPSHOT_MODELS, SNAPSHOT_VERSIONS, CheckpointSnapshot
from oma.errors import CheckpointValidationError
from oma.jsonutil import nesting_depth

# pydantic cannot serialize values nested much deeper than ~255 levels, so a deeper snapshot
# would load and then fail on its first save with an untyped error: refuse it on load instead.
MAX_SNAPSHOT_DEPTH = 200
_RULE_TAG = re.compile(r"rule (2\.6\.\d)")
_RULE_BY_FIELD = {
    "identity": "2.6.2",
    "inFlightTasks": "2.6.3",
    "pendingApprovals": "2.6.5",
    "approvalDecisions": "2.6.5",
    "queue": "2.6.6",
}


def parse_snapshot(raw: Any, key: str, *, depth_checked: bool = False) -> CheckpointSnapshot:
    """A typed snapshot from parsed JSON, or ``CheckpointValidationError`` naming each rule.
    ``depth_checked``: the parser already bounded the nesting at ``MAX_SNAPSHOT_DEPTH``
    (``jsonutil.loads_within``), so the walk that measures it is skipped."""
    if not isinstance(raw, dict):
        raise CheckpointValidationError(key, ["(root): not a JSON object"], {"2.6.1"})
    version = raw.get("version")
    if isinstance(version, bool) or version not in SNAPSHOT_VERSIONS:
        raise CheckpointValidationError(
            key, [f"version: {version!r} is not one of 1, 2, 3, 4, 5"], {"2.6.1"}
        )
    nesting = 0 if depth_checked else nesting_depth(raw)
    if nesting > MAX_SNAPSHOT_DEPTH:
        raise CheckpointValidationError(
            key,
            [f"(root): nested {nesting} levels deep (at most {MAX_SNAPSHOT_DEPTH})"],
            {"2.6.1"},
        )
    model = SNAPSHOT_MODELS[version]
    try:
        snapshot = model.model_validate(raw)
    except ValidationError as exc:
        problems, rules = _describe(exc)
        raise CheckpointValidationError(key, problems, rules) from exc
    assert isinstance(snapshot, CheckpointSnapshot)  # SNAPSHOT_MODELS maps to the union members
    return snapshot


def _describe(error: ValidationError) -> tuple[list[str], set[str]]:
    problems: list[str] = []
    rules: set[str] = set()
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        message = str(item["msg"]).removeprefix("Value error, ")
        tagged = _RULE_TAG.search(message)
        if tagged:
            rule = tagged.group(1)
            message = _RULE_TAG.sub("", message).lstrip(": ").strip()
        elif loc and loc[0] == "inFlightTasks" and "pendingToolCalls" in loc:
            rule = "2.6.4"
        else:
            rule = _RULE_BY_FIELD.get(loc[0], "2.6.1") if loc else "2.6.1"
        rules.add(rule)
        path = ".".join(loc) or "(root)"
        problems.append(f"{path}: {message} [rule {rule}]")
    return problems, rules
