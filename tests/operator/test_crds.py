"""The committed CRDs are exactly what the models generate (regenerate: see crdgen)."""

from __future__ import annotations

from pathlib import Path

from oma_operator.crdgen import render

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_committed_crds_match_a_fresh_generation() -> None:
    for name, text in render().items():
        committed = (CRDS / name).read_text(encoding="utf-8")
        assert committed == text, f"crds/{name} is stale: run `python -m oma_operator.crdgen crds/`"


def test_committed_admission_policies_match_a_fresh_generation() -> None:
    from oma_operator.admission import CHART_FILE, DEPLOY_FILE, render_chart, render_deploy

    for path, text in ((DEPLOY_FILE, render_deploy()), (CHART_FILE, render_chart())):
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run `python -m oma_operator.admission`"
        )
