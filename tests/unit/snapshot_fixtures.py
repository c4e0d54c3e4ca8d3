"""Valid snapshots of every version, built from data the TypeScript implementation wrote."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.conformance_data import load_json


def _checkpoint_value(store_file: str) -> dict[str, Any]:
    for entry in load_json(store_file)["entries"]:
        if entry["key"].endswith("/latest"):
            value: dict[str, Any] = json.loads(entry["value"])
            return value
    raise AssertionError(f"{store_file} holds no checkpoint")


def legacy_case(name: str) -> dict[str, Any]:
    for case in load_json("f-legacy-snapshots.json")["cases"]:
        if case["name"] == name:
            snapshot: dict[str, Any] = case["snapshot"]
            return copy.deepcopy(snapshot)
    raise AssertionError(f"no legacy case {name}")


def v1() -> dict[str, Any]:
    return legacy_case("v1-runTasks-with-runId")


def v2() -> dict[str, Any]:
    return legacy_case("v2-identity-inprogress")


def v2_queue_v2() -> dict[str, Any]:
    return legacy_case("v2-queue-v2-plan-revision")


def v3() -> dict[str, Any]:
    return legacy_case("v3-from-conf-b-crash")


def v4_tool_calls() -> dict[str, Any]:
    """v4 at a crash between two parallel tool calls: one committed, one not."""
    return _checkpoint_value("b-crash-moment.store.json")


def v4_suspended() -> dict[str, Any]:
    """v4 suspended on a tool-call approval (pending request in-flight and top level)."""
    return _checkpoint_value("c1-suspended.store.json")


def v4_decided() -> dict[str, Any]:
    """v4 after restore of an approved tool call: a consumed decision, nothing pending."""
    return _checkpoint_value("c3-restored.store.json")


def v4_completed_in_flight() -> dict[str, Any]:
    """v4 with an in-flight task in phase ``completed`` (built from the tool-call snapshot)."""
    snapshot = v4_tool_calls()
    task = snapshot["inFlightTasks"][0]
    task["phase"] = "completed"
    task["finalOutput"] = "second done"
    del task["pendingToolCalls"]
    return snapshot


def v5() -> dict[str, Any]:
    """v5 as the reference writes it for a run with a run journal: the tool-call v4, the
    journal's watermark and reference, and per in-flight task its mark and message lineage."""
    snapshot = v4_tool_calls()
    snapshot |= {
        "version": 5,
        "journalWatermarkSeq": 12,
        "journalRef": {"kind": "JsonlRunJournal", "path": "/runs/conf-b.jsonl"},
    }
    for task in snapshot["inFlightTasks"]:
        task["journalSeq"] = 12
        task["conversationLineage"] = [
            [[n + 1]] for n, _ in enumerate(task["conversationMessages"])
        ]
    return snapshot
