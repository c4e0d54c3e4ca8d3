"""Seed documents for mutation: real snapshots and store files written by the TypeScript
implementation (``shared/conformance/oma-ts``), loaded once."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from tests.conformance_data import require_conformance_dir
from tests.unit import snapshot_fixtures


@functools.cache
def _snapshots() -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = [
        snapshot_fixtures.v1(),
        snapshot_fixtures.v2(),
        snapshot_fixtures.v2_queue_v2(),
        snapshot_fixtures.v3(),
        snapshot_fixtures.v4_completed_in_flight(),
    ]
    for path in store_files():
        for entry in json.loads(path.read_text(encoding="utf-8"))["entries"]:
            if entry["key"].endswith("/latest"):
                found.append(json.loads(entry["value"]))
    return tuple(found)


def snapshot(index: int) -> dict[str, Any]:
    """A deep copy of seed ``index`` (modulo the number of seeds)."""
    seeds = _snapshots()
    return copy.deepcopy(seeds[index % len(seeds)])


@functools.cache
def store_files() -> tuple[Path, ...]:
    return tuple(sorted(require_conformance_dir().glob("*.store.json")))


def store_file_bytes(index: int) -> bytes:
    files = store_files()
    return files[index % len(files)].read_bytes()


@functools.cache
def _approval_rows() -> tuple[dict[str, Any], ...]:
    rows = []
    for path in store_files():
        for entry in json.loads(path.read_text(encoding="utf-8"))["entries"]:
            if entry["key"].startswith("__oma_approval__/"):
                rows.append(json.loads(entry["value"]))
    return tuple(rows)


def approval_row(index: int) -> dict[str, Any]:
    """A real ledger row (``{version, request, decision?}``) written by the reference."""
    rows = _approval_rows()
    return copy.deepcopy(rows[index % len(rows)])
