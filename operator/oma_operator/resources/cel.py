"""CEL the TeamRun CRD's rules and the admission policies share (pure): the same comparison
must mean the same thing to both, or a field frozen by one would make nobody an editor in the
other."""

from __future__ import annotations


def present(root: str, path: str) -> str:
    """CEL: every step of the dotted ``path`` under ``root`` is set (``has`` on a missing parent
    is an error, not false)."""
    steps = path.split(".")
    return " && ".join(f"has({root}.{'.'.join(steps[: i + 1])})" for i in range(len(steps)))


def unchanged(new: str, old: str, path: str) -> str:
    """CEL: the optional field at ``path`` is neither added, removed nor changed between the
    objects ``new`` and ``old`` (a rule on the field itself would not see it added or removed)."""
    now, before = present(new, path), present(old, path)
    return f"(({now}) == ({before}) && (!({now}) || {new}.{path} == {old}.{path}))"


def all_unchanged(new: str, old: str, paths: list[str]) -> str:
    return " && ".join(unchanged(new, old, path) for path in paths)
