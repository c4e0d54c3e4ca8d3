"""A TeamRun's spec, parsed once per generation, and the digest of what it executes (pure).

Every handler and periodic loop needs the typed spec; it changes only with the TeamRun's
``metadata.generation``, so it is validated once per (uid, generation) instead of on every event
and every poll.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from oma.errors import OmaError
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import MAX_TEAMRUN_NAME, TeamRunSpec, work_fields

CACHE_SIZE = 4096


class TeamRunSpecError(OmaError):
    """The spec is not a valid TeamRun spec; ``problems`` lists them on one line."""

    code = "TEAMRUN_SPEC_INVALID"

    def __init__(self, problems: str) -> None:
        self.problems = problems
        super().__init__(f"invalid spec: {problems}")


_parsed: OrderedDict[tuple[str, int], TeamRunSpec] = OrderedDict()


def spec_of(teamrun: TeamRunBody) -> TeamRunSpec:
    """The typed spec of ``teamrun``; raises ``TeamRunSpecError``."""
    meta = teamrun.get("metadata") or {}
    key = (str(meta.get("uid", "")), int(meta.get("generation") or 0))
    found = _parsed.get(key) if key[0] else None
    if found is not None:
        _parsed.move_to_end(key)
        return found
    name = str(meta.get("name", ""))
    if len(name) > MAX_TEAMRUN_NAME:  # created before the CRD said so
        raise TeamRunSpecError(
            f"metadata.name: {len(name)} characters, at most {MAX_TEAMRUN_NAME} (its pods are "
            "<name>-a<attempt>); create it again under a shorter name"
        )
    try:
        spec = TeamRunSpec.model_validate(dict(teamrun.get("spec") or {}))
    except ValidationError as exc:
        raise TeamRunSpecError(problems_of(exc)) from exc
    if key[0]:
        _parsed[key] = spec
        while len(_parsed) > CACHE_SIZE:
            _parsed.popitem(last=False)
    return spec


def problems_of(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors())


def run_id_of(body: TeamRunBody) -> str:
    """The run id a TeamRun's checkpoints are stored under: ``spec.runId``, else
    ``<namespace>.<name>``."""
    spec = body.get("spec") or {}
    meta = body["metadata"]
    return str(spec.get("runId") or f"{meta['namespace']}.{meta['name']}")


def work_digest(teamrun: TeamRunBody) -> str:
    """``sha256:<hex>`` of the spec's work fields as the API holds them (what the run executes;
    not the hold or placement fields): recorded when an attempt starts, so a retry can tell
    whether the spec its approvals were given under is still the one it would run."""
    spec = teamrun.get("spec") or {}
    work: dict[str, Any] = {}
    for path in work_fields():
        value: Any = spec
        for step in path.split("."):
            value = value.get(step) if isinstance(value, Mapping) else None
        if value is not None:
            work[path] = value
    return "sha256:" + hashlib.sha256(orjson.dumps(work, option=orjson.OPT_SORT_KEYS)).hexdigest()
