"""The workflow the fault harness kills: two agents, dependencies, parallel tool calls, shared
memory, an approval-gated tool, an idempotent external ledger and a non-idempotent tally."""

from __future__ import annotations

from typing import Any

# Tool call ids per task title: the scripted model issues exactly these.
CALLS: dict[str, list[str]] = {
    "Collect": ["c-1", "c-2", "c-3"],
    "Price": ["p-1", "p-2"],
    "Report": ["r-1", "r-2"],
}
OUTPUTS = {"Collect": "collected a and b", "Price": "priced x", "Report": "report sent"}


def spec(store: dict[str, Any]) -> dict[str, Any]:
    def ledger(call_id: str, entry: str, amount: int) -> dict[str, Any]:
        return {
            "id": call_id,
            "name": "ledger_append",
            "input": {"entry": entry, "amount": amount},
        }

    def tally(call_id: str, item: str) -> dict[str, Any]:
        return {"id": call_id, "name": "tally", "input": {"item": item, "amount": 1}}

    return {
        "mode": "tasks",
        "maxConcurrency": 2,
        "sharedMemory": True,
        "store": store,
        # Every echo call waits for a reviewer: the run suspends once on its way.
        "approvals": {"tools": ["echo"]},
        "agents": [
            {
                "name": "alice",
                "tools": ["ledger_append", "tally"],
                "model": {
                    "provider": "scripted",
                    "script": {
                        "# Task: Collect": [
                            {
                                "tool_calls": [
                                    ledger("c-1", "collect-a", 1),
                                    ledger("c-2", "collect-b", 2),
                                    tally("c-3", "collected"),
                                ]
                            },
                            {"text": OUTPUTS["Collect"]},
                        ]
                    },
                },
            },
            {
                "name": "bob",
                "tools": ["ledger_append", "tally", "echo"],
                "model": {
                    "provider": "scripted",
                    "script": {
                        "# Task: Price": [
                            {"tool_calls": [ledger("p-1", "price-x", 5), tally("p-2", "priced")]},
                            {"text": OUTPUTS["Price"]},
                        ],
                        "# Task: Report": [
                            {
                                "tool_calls": [
                                    {"id": "r-1", "name": "echo", "input": {"text": "send"}},
                                    ledger("r-2", "report", 9),
                                ]
                            },
                            {"text": OUTPUTS["Report"]},
                        ],
                    },
                },
            },
        ],
        "tasks": [
            {"title": "Collect", "description": "Collect the items.", "assignee": "alice"},
            {"title": "Price", "description": "Price the items.", "assignee": "bob"},
            {
                "title": "Report",
                "description": "Report on collection and prices.",
                "assignee": "bob",
                "dependsOn": ["Collect", "Price"],
            },
        ],
    }
