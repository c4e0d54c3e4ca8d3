"""The committed CRDs are exactly what the models generate (regenerate: see crdgen)."""

from __future__ import annotations

from pathlib import Path

from oma_operator.crdgen import render

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_committed_crds_match_a_fresh_generation() -> None:
    for name, text in render().items():
        committed = (CRDS / name).read_text(encoding="utf-8")
        assert committed == text, f"crds/{name} is stale: run `python -m oma_operator.crdgen crds/`"
