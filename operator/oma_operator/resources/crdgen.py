"""CustomResourceDefinitions generated from the pydantic models (never edited by hand).

    python -m oma_operator.resources.crdgen crds/     # rewrites crds/*.yaml

The pydantic JSON schema is turned into a Kubernetes structural schema: references inlined,
``Optional`` unwrapped, free-form values marked ``x-kubernetes-preserve-unknown-fields``, and
CEL rules added where the API server must enforce them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from oma.approval.words import resolutions_by_decision
from oma_operator.resources.cel import all_unchanged, unchanged
from oma_operator.resources.models import (
    GROUP,
    HOLD_FIELDS,
    MAX_TEAMRUN_NAME,
    PLACEMENT_FIELDS,
    VERSION,
    ApprovalDecisionSpec,
    TeamRunSpec,
    work_fields,
)
from oma_operator.resources.phases import CONDITION_TYPES, FINAL_PHASES

PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}
DROP = {"title", "$defs", "discriminator"}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(schema, schema.get("$defs", {}))


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON Schema node as a structural OpenAPI v3 schema Kubernetes accepts."""
    if "$ref" in node:
        return _described(_convert(defs[node["$ref"].split("/")[-1]], defs), node)
    options = node.get("anyOf") or node.get("oneOf")
    if options is not None:
        real = [o for o in options if o.get("type") != "null"]
        if len(real) == 1:
            return _described(_convert(real[0], defs), node)
        return _described(dict(PRESERVE), node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in DROP and not (key == "default" and value is None):
            out.update(_converted_key(key, value, defs))
    return _completed(out)


def _described(converted: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """The field's own words win over its type's docstring."""
    if "description" in node:
        converted["description"] = node["description"]
    return converted


def _converted_key(key: str, value: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """What one key of a schema node becomes."""
    if key == "const":
        return {"enum": [value]}
    if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
        # JSON Schema 2020 numbers; Kubernetes speaks OpenAPI v3: a bound plus a flag
        return {"minimum" if key == "exclusiveMinimum" else "maximum": value, key: True}
    if key == "properties":
        return {"properties": {name: _convert(sub, defs) for name, sub in value.items()}}
    if key == "items":
        return {"items": _convert(value, defs)}
    if key == "additionalProperties":
        if isinstance(value, dict) and value:
            return {"additionalProperties": _convert(value, defs)}
        return dict(PRESERVE) if value else {}
    return {key: value}


def _completed(out: dict[str, Any]) -> dict[str, Any]:
    """A node without a type is free-form; an object without properties is a map."""
    if (
        "type" not in out
        and "enum" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out.update(PRESERVE)  # Any: free-form JSON
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        # A map of free-form values, not an object of unknown fields: CEL compares the keys of
        # a map, while two objects with unknown fields only (`valueFrom: {secretKeyRef}` and
        # `{configMapKeyRef}`) compare equal, which let an edit past the frozen-spec rule.
        out["additionalProperties"] = dict(PRESERVE)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def teamrun_crd() -> dict[str, Any]:
    spec = structural(TeamRunSpec)
    spec["x-kubernetes-validations"] = [
        # The run spec's cross-field rules (oma.spec.check_work), as far as CEL says them.
        {"rule": "self.mode != 'tasks' || has(self.tasks)", "message": "mode tasks needs tasks"},
        {"rule": "self.mode != 'team' || has(self.goal)", "message": "mode team needs a goal"},
        {"rule": "self.mode != 'plan' || has(self.plan)", "message": "mode plan needs a plan"},
        {
            "rule": "(self.mode == 'tasks' || !has(self.tasks)) && "
            "(self.mode == 'team' || !has(self.goal)) && (self.mode == 'plan' || !has(self.plan))",
            "message": "a run takes the work of its mode only: tasks (mode tasks), a goal "
            "(mode team) or a plan (mode plan)",
        },
        {
            "rule": "self.team.agents.all(a, self.team.agents.exists_one(b, b.name == a.name))",
            "message": "agent names must be unique",
        },
        {
            "rule": "!has(self.tasks) || self.tasks.all(t, !has(t.assignee) || "
            "self.team.agents.exists(a, a.name == t.assignee))",
            "message": "every task's assignee must be one of team.agents",
        },
        {
            # Neither set, changed nor removed once the TeamRun exists: a runId added later
            # would start a fresh run beside the checkpointed one and repeat its side effects.
            "rule": "has(self.runId) == has(oldSelf.runId) && "
            "(!has(self.runId) || self.runId == oldSelf.runId)",
            "message": "runId is immutable: it cannot be set, changed or removed after creation "
            "(create a new TeamRun for a new run)",
        },
        {
            # A cancelled run ended for good; clearing the field would suggest it could go on.
            "rule": "!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",
            "message": "cancel cannot be set back to false once true: a cancelled run is over "
            "(create a new TeamRun to run the work again)",
        },
        {
            # Gates and reviewers decide who may let a side effect happen: changing them on a
            # suspended run would let its author drop a gate or name another reviewer.
            "rule": _unchanged("approvals"),
            "message": "approvals (gates and reviewers) are immutable: create a new TeamRun",
        },
        {
            # A budget is raised by its reviewers (scope budget), not by whoever edits the run.
            "rule": _unchanged("budget"),
            "message": "budget is immutable: a run asks its reviewers to raise it when it "
            "would pass a limit (an ApprovalDecision of scope budget)",
        },
    ]
    spec["properties"]["budget"]["x-kubernetes-validations"] = [
        {
            "rule": "has(self.tokens) || has(self.modelCalls) || has(self.toolCalls)",
            "message": "budget needs at least one of tokens, modelCalls, toolCalls",
        }
    ]
    spec["properties"]["store"]["x-kubernetes-validations"] = [
        {
            "rule": "[has(self.redis), has(self.postgres)].filter(x, x).size() == 1",
            "message": "store needs exactly one of redis or postgres",
        },
        {
            "rule": "!(has(self.redact) && self.redact && has(self.events) && "
            "has(self.events.enabled) && self.events.enabled)",
            "message": "store.events needs the verbatim content (its blocks are checked by "
            "their hashes): turn off store.redact, or store.events",
        },
    ]
    return _crd(
        kind="TeamRun",
        plural="teamruns",
        short=["omatr"],  # not "tr": that is Tekton's TaskRun
        spec=spec,
        rules=[
            _frozen_work_rule(),
            {
                # <name>-a<attempt> names its pods and labels them: both stop at 63 characters.
                "rule": f"self.metadata.name.size() <= {MAX_TEAMRUN_NAME}",
                "message": f"a TeamRun name has at most {MAX_TEAMRUN_NAME} characters (its pods "
                "are <name>-a<attempt>, and labels and host names stop at 63)",
            },
        ],
        status=_status_schema(),
        columns=[
            ("Phase", "string", ".status.phase"),
            ("Attempt", "integer", ".status.attempt"),
            ("Tasks", "string", ".status.taskSummary"),
            ("Approvals", "integer", ".status.pendingApprovals"),
            ("Spend", "string", ".status.budgetSummary"),
            ("Checkpoint", "date", ".status.lastCheckpointAt"),
            ("Age", "date", ".metadata.creationTimestamp"),
            # kubectl get teamruns -o wide: which run, which pod, how it is doing.
            ("Run", "string", ".status.runId", 1),
            ("Disruptions", "integer", ".status.disruptions", 1),
            ("Failures", "integer", ".status.failures", 1),
            ("Turns", "integer", ".status.turns", 1),
            ("Started", "date", ".status.startTime", 1),
            ("Completed", "date", ".status.completionTime", 1),
            ("Message", "string", ".status.message", 1),  # last: the long one
        ],
    )


def _frozen_work_rule() -> dict[str, str]:
    """From a run's first attempt until it ends, what it executes stays what it started with
    (and what its reviewers saw): a later attempt resumes the checkpoint under the same spec.
    Root level, to see the status the operator keeps (users cannot write it)."""
    status = "oldSelf.status"
    not_started = (
        f"!has({status}) || !has({status}.attempt) || {status}.attempt == 0 || "
        f"(has({status}.phase) && {status}.phase in [{', '.join(map(repr, sorted(FINAL_PHASES)))}])"
    )
    unchanged = all_unchanged("self.spec", "oldSelf.spec", work_fields())
    placement = ", ".join(f"runner.{field}" for field in PLACEMENT_FIELDS)
    return {
        "rule": f"{not_started} || ({unchanged})",
        "message": "the spec of a TeamRun is frozen while an attempt runs or waits (from its "
        f"first attempt until it ends): only {', '.join(HOLD_FIELDS)} and {placement} may "
        "change. To run other work, cancel it and create a new TeamRun; a Failed run's spec "
        "may be fixed before oma retry",
    }


def _unchanged(field: str) -> str:
    return unchanged("self", "oldSelf", field)


# What a reviewer sets, once, in the one change that moves the decision out of Pending.
DECISION_FIELDS = ("reviewer", "reason", "resolution", "result")


def _resolution_rule() -> dict[str, str]:
    """Which resolution goes with which decision, from the one table of decision words."""
    pairs = resolutions_by_decision()
    allowed = " || ".join(
        f"(self.decision == '{decision}' && self.resolution in "
        f"[{', '.join(repr(r) for r in resolutions)}])"
        for decision, resolutions in pairs.items()
    )
    said = "; ".join(
        f"{' or '.join(resolutions)} goes with {decision}"
        for decision, resolutions in pairs.items()
    )
    return {
        "rule": f"!has(self.resolution) || self.decision == 'Pending' || {allowed}",
        "message": f"resolution {said}",
    }


def approvaldecision_crd() -> dict[str, Any]:
    spec = structural(ApprovalDecisionSpec)
    props = spec["properties"]
    for field in ("teamRun", "requestId", "requestHash", "scope", "summary"):
        props[field]["x-kubernetes-validations"] = [
            {"rule": "self == oldSelf", "message": f"{field} is immutable"}
        ]
    props["decision"]["x-kubernetes-validations"] = [
        {
            "rule": "oldSelf == 'Pending' || self == oldSelf",
            "message": "a decision is final: Pending -> Approved or Rejected, once",
        }
    ]
    optional_request_fields = ("boundary", "content", "reviewers", "excludedReviewers")
    unchanged = " && ".join(
        f"(has(self.{f}) ? self.{f} : '') == (has(oldSelf.{f}) ? oldSelf.{f} : '')"
        for f in DECISION_FIELDS
    )
    absent = " && ".join(f"!has(self.{f})" for f in DECISION_FIELDS)
    spec["x-kubernetes-validations"] = [
        {
            "rule": " && ".join(_unchanged(f) for f in optional_request_fields),
            "message": "boundary, content, reviewers and excludedReviewers are immutable",
        },
        {
            # Nobody prepares a decision for the reviewer: what is recorded as theirs is what
            # they set themselves, in the request the reviewer policy checks.
            "rule": f"self.decision != 'Pending' || ({absent})",
            "message": "reviewer, reason, resolution and result are set together with the "
            "decision, in the one change that moves it out of Pending",
        },
        {
            "rule": "self.decision == 'Pending' || has(self.reviewer)",
            "message": "a decision needs spec.reviewer (your own user name)",
        },
        {
            # Who decided, why, and how an uncertain call was settled are part of the decision:
            # final with it (an audit record).
            "rule": f"oldSelf.decision == 'Pending' || ({unchanged})",
            "message": "reviewer, reason, resolution and result are final once the decision is "
            "made",
        },
        {
            "rule": "self.scope == 'uncertain_tool_call' || (!has(self.resolution) && "
            "!has(self.result))",
            "message": "resolution and result are only for scope uncertain_tool_call",
        },
        _resolution_rule(),
        {
            "rule": "!has(self.result) || (has(self.resolution) && self.resolution == 'Done')",
            "message": "result is only recorded with resolution Done",
        },
    ]
    return _crd(
        kind="ApprovalDecision",
        plural="approvaldecisions",
        short=["ad"],
        spec=spec,
        status=_decision_status_schema(),
        columns=[
            ("TeamRun", "string", ".spec.teamRun"),
            ("Scope", "string", ".spec.scope"),
            ("Decision", "string", ".status.decision"),
            ("Reviewer", "string", ".status.reviewer"),
            ("Expires", "string", ".status.expiresAt"),
            ("Age", "date", ".metadata.creationTimestamp"),
            ("Requested", "string", ".spec.decision", 1),
            ("Verified", "boolean", ".status.verified", 1),
            ("Request", "string", ".spec.requestId", 1),
        ],
    )


def _decision_status_schema() -> dict[str, Any]:
    def field(kind: str, description: str) -> dict[str, Any]:
        return {"type": kind, "description": description}

    return {
        "type": "object",
        "description": "Written by the operator only: the store ledger's state of the request.",
        "properties": {
            "verified": field(
                "boolean",
                "True: the operator published this resource for its request, and a decision "
                "set here counts; false: it decides nothing (message says why).",
            ),
            "recorded": field("boolean", "The ledger holds a decision on the request."),
            "decision": field("string", "The ledger's decision: Pending, Approved or Rejected."),
            "resolution": field("string", "How an uncertain tool call was settled."),
            "reviewer": field("string", "Who made the recorded decision."),
            "reason": field("string", "Why, as recorded with the decision."),
            "decidedAt": field("string", "When the recorded decision was made."),
            "message": field("string", "Why a decision set here was not recorded, if it was not."),
            "expiresAt": field(
                "string",
                "When the request is decided by expiry if nobody decides it first (the TeamRun's "
                "approvals.expireAfterSeconds); a decision set after it is not recorded. Shown "
                "while the request waits; once decided, decidedAt says when.",
            ),
        },
    }


def _status_schema() -> dict[str, Any]:
    def field(kind: str, description: str, **extra: Any) -> dict[str, Any]:
        return {"type": kind, "description": description, **extra}

    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": field("string", f"{', '.join(CONDITION_TYPES[:-1])} or {CONDITION_TYPES[-1]}."),
            "status": field("string", "True, False or Unknown."),
            "reason": field("string", "Why, in one CamelCase word."),
            "message": field("string", "Why, for a person."),
            "lastTransitionTime": field("string", "When status last changed.", format="date-time"),
            "observedGeneration": field("integer", "The spec generation this reflects."),
        },
    }
    return {
        "type": "object",
        "properties": {
            "runId": field("string", "The run id the checkpoints are stored under."),
            "attempt": field("integer", "The current (or last) attempt; each has its own pod."),
            "phase": field(
                "string",
                "Queued (waiting for a slot under the operator's concurrency limits), Running, "
                "AwaitingApproval, Suspended (spec.suspend), Succeeded, Failed, Rejected or "
                "Cancelled (spec.cancel).",
            ),
            "queuedAt": field(
                "string", "Since when a Queued run waits for a slot (first in, first out)."
            ),
            "startTime": field("string", "When the run's first attempt started."),
            "output": {
                "type": "object",
                "description": "A succeeded run's output: tasks (taskId, title, result: the "
                "first 1024 characters of each of the first 20 completed tasks, truncated when "
                "cut), omitted (completed tasks past 20) and more (the command that shows the "
                "whole checkpoint).",
                **PRESERVE,
            },
            "completionTime": field(
                "string",
                "When the run ended (Succeeded, Failed, Rejected or Cancelled); removed by a "
                "retry.",
            ),
            "observedGeneration": field("integer", "The spec generation last acted on."),
            "conditions": {
                "type": "array",
                "description": "Standard conditions, one per type.",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "attempts": {
                "type": "array",
                "maxItems": 50,
                "description": "The last 50 attempts: attempt, pod, outcome, reason, exitCode, "
                "message, endedAt.",
                "items": {"type": "object", **PRESERVE},
            },
            "disruptions": field("integer", "Disruptions so far (evictions, drains, lost nodes)."),
            "failures": field("integer", "Failures so far (crashes, start timeouts)."),
            "oomKills": field("integer", "OOM kills so far."),
            "taskSummary": field("string", "Tasks completed/total, from the store or the runner."),
            "turns": field(
                "integer",
                "The model turns the tasks in flight have taken so far (a long task shows it "
                "moves before it completes), from the store.",
            ),
            "pendingApprovals": field("integer", "Approval requests waiting for a decision."),
            "budget": {
                "type": "object",
                "description": "With spec.budget: limits (the spec's plus approved raises) and "
                "spent (inputTokens, outputTokens, lostTokens, modelCalls, lostModelCalls, "
                "toolCalls) across all attempts, and reservedTokens of calls under way; from "
                "the store while the run runs, and from the runner when an attempt ends.",
                **PRESERVE,
            },
            "budgetSummary": field(
                "string", "Spend against the budget's first limit, e.g. 1200/5000 tokens."
            ),
            "lastCheckpointAt": field("string", "When the latest checkpoint was saved."),
            "checkpointSaved": field(
                "boolean",
                "An attempt saved a checkpoint: later attempts must find it (CheckpointLost).",
            ),
            "nextAttemptAfter": field("string", "When the next attempt may start (a backoff)."),
            "modelOutageSince": field(
                "string",
                "When the model provider's current outage began: where the model calls of the "
                "first of the attempts that ended ModelUnavailable one after another began "
                "failing (an attempt whose calls worked before they failed starts a new "
                "outage); gone once an attempt ends otherwise.",
            ),
            "toolChangedSince": field(
                "string",
                "When the run began holding for a changed tool: the end of the first of the "
                "attempts that found a tool it recorded changed or gone on its server (ToolChanged,"
                " one after another); gone once an attempt ends otherwise.",
            ),
            "stoppedForHold": field(
                "string",
                "The runner pod the operator stopped for spec.suspend or spec.cancel: its end "
                "is the hold's, never a disruption, also if the hold is cleared before it.",
            ),
            "workDigest": field(
                "string",
                "sha256 of the spec's work fields (all but the hold and placement fields) the "
                "last attempt started under: a retry after they changed is refused while "
                "approved work has not run.",
            ),
            "retries": {
                "type": "array",
                "maxItems": 20,
                "description": "The last 20 retries of the failed run (oma retry): requested, "
                "retriedAt, attempt (the one that had failed), failures, disruptions and "
                "oomKills (the budgets used, then reset), reason; a refused one has refusedAt, "
                "reason SpecChangedSinceApproval and a message instead.",
                "items": {"type": "object", **PRESERVE},
            },
            "message": field("string", "What happened last, for a person."),
        },
    }


def _crd(
    *,
    kind: str,
    plural: str,
    short: list[str],
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[tuple[str, str, str] | tuple[str, str, str, int]],
    rules: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    root: dict[str, Any] = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {"description": f"What the {kind} asks for (written by its user).", **spec},
            "status": {
                "description": f"What the operator observed of the {kind} (written by it only).",
                **status,
            },
        },
    }
    if rules:
        root["x-kubernetes-validations"] = rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["oma"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [_column(*column) for column in columns],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def _column(name: str, kind: str, path: str, priority: int = 0) -> dict[str, Any]:
    """A printer column; priority 1 shows only with ``kubectl get -o wide``."""
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


def render() -> dict[str, str]:
    header = (
        "# Generated by `python -m oma_operator.resources.crdgen crds/` from "
        "oma_operator.resources.models.\n"
    )
    return {
        "teamruns.oma.dev.yaml": header + yaml.safe_dump(teamrun_crd(), sort_keys=False),
        "approvaldecisions.oma.dev.yaml": header
        + yaml.safe_dump(approvaldecision_crd(), sort_keys=False),
    }


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "crds")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (target / name).write_text(text, encoding="utf-8")
        print(f"wrote {target / name}")


if __name__ == "__main__":
    main()
