"""The operator reads TeamRuns, Pods and ApprovalDecisions through typed views
(``oma_operator.resources.bodies``), never as ``dict[str, Any]``: mypy then refuses a misspelt
status key or a phase that is not one. A grep over the operator's source, by the names such a
body goes by, keeps it so; kopf's own ``kopf.Body`` is allowed only in the handlers, where a
raw body becomes a view (``teamrun_view``, ``pod_view``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "operator" / "oma_operator"
# What a TeamRun, Pod or ApprovalDecision is called in the operator, as a parameter or variable.
BODY_NAMES = frozenset(
    {"body", "teamrun", "pod", "decision", "resource", "fresh", "written", "seen", "known"}
)
UNTYPED = re.compile(
    r"^(dict\[str, Any\]|Mapping\[str, Any\]|Any|dict|Mapping\[str, object\])( \| None)?$"
)
# The client's reads and writes of these objects return views, not raw JSON.
READERS = re.compile(r"^(get|list|create|patch|annotate)_(teamrun|pod|decision)")


def _findings() -> list[str]:
    found = []
    for path in sorted(OPERATOR.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(OPERATOR.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                for arg in arguments:
                    if arg.arg in BODY_NAMES and arg.annotation is not None:
                        text = ast.unparse(arg.annotation)
                        kopf_boundary = text == "kopf.Body" and path.name == "handlers.py"
                        if UNTYPED.match(text) or (text == "kopf.Body" and not kopf_boundary):
                            found.append(f"{where}:{node.lineno} {node.name}({arg.arg}: {text})")
                if READERS.match(node.name) and node.returns is not None:
                    text = ast.unparse(node.returns)
                    if "dict[str, Any]" in text:
                        found.append(f"{where}:{node.lineno} {node.name}() -> {text}")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                text = ast.unparse(node.annotation)
                if node.target.id in BODY_NAMES and UNTYPED.match(text):
                    found.append(f"{where}:{node.lineno} {node.target.id}: {text}")
    return found


def test_no_teamrun_pod_or_decision_body_is_an_untyped_dict() -> None:
    assert _findings() == []


def test_the_check_finds_an_untyped_body(tmp_path: Path) -> None:
    """The grep above would see one: the same rules over a module that has them."""
    module = tmp_path / "sample.py"
    module.write_text(
        "from typing import Any\n"
        "def record(teamrun: dict[str, Any], pod: Any) -> None: ...\n"
        "async def get_teamrun(name: str) -> dict[str, Any] | None: ...\n"
        "fresh: dict[str, Any] = {}\n"
    )
    global OPERATOR
    kept, OPERATOR = OPERATOR, tmp_path
    try:
        found = _findings()
    finally:
        OPERATOR = kept
    assert len(found) == 4, found
