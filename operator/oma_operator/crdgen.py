"""CustomResourceDefinitions generated from the pydantic models (never edited by hand).

    python -m oma_operator.crdgen crds/     # rewrites crds/*.yaml

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

from oma_operator.models import GROUP, VERSION, ApprovalDecisionSpec, TeamRunSpec

PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}
DROP = {"title", "$defs", "discriminator"}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(schema, schema.get("$defs", {}))


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _convert(defs[node["$ref"].split("/")[-1]], defs)
    options = node.get("anyOf") or node.get("oneOf")
    if options is not None:
        real = [o for o in options if o.get("type") != "null"]
        if len(real) == 1:
            converted = _convert(real[0], defs)
            if "description" in node:
                converted["description"] = node["description"]
            return converted
        return {
            **PRESERVE,
            **({"description": node["description"]} if "description" in node else {}),
        }
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020 numbers; Kubernetes speaks OpenAPI v3: a bound plus a flag
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = _convert(value, defs)
            elif value:
                out.update(PRESERVE)
        else:
            out[key] = value
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
        out.update(PRESERVE)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def teamrun_crd() -> dict[str, Any]:
    spec = structural(TeamRunSpec)
    spec["x-kubernetes-validations"] = [
        {"rule": "self.mode != 'tasks' || has(self.tasks)", "message": "mode tasks needs tasks"},
        {"rule": "self.mode != 'team' || has(self.goal)", "message": "mode team needs a goal"},
        {"rule": "self.mode != 'plan' || has(self.plan)", "message": "mode plan needs a plan"},
        {
            "rule": "!has(oldSelf.runId) || (has(self.runId) && self.runId == oldSelf.runId)",
            "message": "runId is immutable",
        },
    ]
    spec["properties"]["store"]["x-kubernetes-validations"] = [
        {
            "rule": "[has(self.redis), has(self.postgres)].filter(x, x).size() == 1",
            "message": "store needs exactly one of redis or postgres",
        }
    ]
    return _crd(
        kind="TeamRun",
        plural="teamruns",
        short=["tr"],
        spec=spec,
        status=_status_schema(),
        columns=[
            ("Phase", "string", ".status.phase"),
            ("Attempt", "integer", ".status.attempt"),
            ("Tasks", "string", ".status.taskSummary"),
            ("Approvals", "integer", ".status.pendingApprovals"),
            ("Checkpoint", "date", ".status.lastCheckpointAt"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    )


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
    # Who decided, and why, are part of the decision: final with it (an audit record).
    spec["x-kubernetes-validations"] = [
        {
            "rule": "oldSelf.decision == 'Pending' || ("
            "(has(self.reviewer) ? self.reviewer : '') == "
            "(has(oldSelf.reviewer) ? oldSelf.reviewer : '') && "
            "(has(self.reason) ? self.reason : '') == (has(oldSelf.reason) ? oldSelf.reason : ''))",
            "message": "reviewer and reason are final once the decision is made",
        }
    ]
    return _crd(
        kind="ApprovalDecision",
        plural="approvaldecisions",
        short=["ad"],
        spec=spec,
        status={"type": "object", **PRESERVE},
        columns=[
            ("TeamRun", "string", ".spec.teamRun"),
            ("Scope", "string", ".spec.scope"),
            ("Decision", "string", ".spec.decision"),
            ("Reviewer", "string", ".spec.reviewer"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    )


def _status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "runId": {"type": "string"},
            "attempt": {"type": "integer"},
            "phase": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "attempts": {"type": "array", "maxItems": 50, "items": {"type": "object", **PRESERVE}},
            "disruptions": {"type": "integer"},
            "failures": {"type": "integer"},
            "oomKills": {"type": "integer"},
            "taskSummary": {"type": "string"},
            "pendingApprovals": {"type": "integer"},
            "lastCheckpointAt": {"type": "string"},
            "nextAttemptAfter": {"type": "string"},
            "message": {"type": "string"},
        },
    }


def _crd(
    *,
    kind: str,
    plural: str,
    short: list[str],
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[tuple[str, str, str]],
) -> dict[str, Any]:
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
                    "additionalPrinterColumns": [
                        {"name": n, "type": t, "jsonPath": p} for n, t, p in columns
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {"spec": spec, "status": status},
                        }
                    },
                }
            ],
        },
    }


def render() -> dict[str, str]:
    header = "# Generated by `python -m oma_operator.crdgen crds/` from oma_operator.models.\n"
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
