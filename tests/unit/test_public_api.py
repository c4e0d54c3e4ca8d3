"""The public API, pinned: the names ``oma`` exports are exactly these (a change to them is a
change for every user, to be made here on purpose and said in CHANGELOG.md), every other name
on ``oma`` is private or a subpackage, and every public class and function has a docstring."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types

import oma
from api_reference import MODULES

PUBLIC = [
    "AgentConfig",
    "ApprovalDecisionRecord",
    "ApprovalRequest",
    "CheckpointDecodeError",
    "CheckpointError",
    "CheckpointOptions",
    "CheckpointValidationError",
    "DurableApprovalError",
    "FileStore",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "OmaError",
    "OpenMultiAgent",
    "OrchestratorEvent",
    "PlanArtifact",
    "ScriptedAdapter",
    "StoreCorruptError",
    "StoreError",
    "TaskSpec",
    "Team",
    "TeamRunResult",
    "ToolContext",
    "ToolResult",
    "__version__",
    "create_approval_request",
    "define_tool",
    "hash_approval_request",
]


def test_oma_exports_exactly_the_pinned_names() -> None:
    assert sorted(oma.__all__) == sorted(PUBLIC)
    assert len(set(oma.__all__)) == len(oma.__all__)
    for name in oma.__all__:
        assert hasattr(oma, name), name


def test_every_other_name_on_oma_is_private_or_a_subpackage() -> None:
    stray = [
        name
        for name, value in vars(oma).items()
        if not name.startswith("_")
        and name not in oma.__all__
        and not (isinstance(value, types.ModuleType) and value.__name__ == f"oma.{name}")
    ]
    assert stray == [], f"public names not in oma.__all__: {stray}"


def test_every_public_class_and_function_has_a_docstring() -> None:
    missing = []
    for package in MODULES:  # oma and the subpackages a user imports from
        module = importlib.import_module(package)
        assert isinstance(module.__all__, list), package
        for name in module.__all__:
            value = getattr(module, name)
            doc = (value.__doc__ or "").strip()
            # @dataclass writes the signature as the docstring of a class that has none.
            generated = inspect.isclass(value) and dataclasses.is_dataclass(value)
            generated = generated and doc.startswith(f"{value.__name__}(")
            documented = bool(doc) and not generated
            if (inspect.isclass(value) or inspect.isfunction(value)) and not documented:
                missing.append(f"{package}.{name}")
    assert missing == []
