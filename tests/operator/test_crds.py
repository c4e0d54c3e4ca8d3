"""The committed CRDs are exactly what the models generate (regenerate: see crdgen)."""

from __future__ import annotations

from pathlib import Path

from oma_operator.resources.crdgen import render

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_committed_crds_match_a_fresh_generation() -> None:
    for name, text in render().items():
        committed = (CRDS / name).read_text(encoding="utf-8")
        assert committed == text, (
            f"crds/{name} is stale: run `python -m oma_operator.resources.crdgen crds/`"
        )


def test_committed_admission_policies_match_a_fresh_generation() -> None:
    from oma_operator.resources.admission import (
        CHART_FILE,
        DEPLOY_FILE,
        render_chart,
        render_deploy,
    )

    for path, text in ((DEPLOY_FILE, render_deploy()), (CHART_FILE, render_chart())):
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run `python -m oma_operator.resources.admission`"
        )


# Short names other widely installed CRDs and built-in kinds already claim: kubectl resolves a
# short name to one resource, silently (with Tekton installed, `kubectl get tr` listed TaskRuns).
CLAIMED_SHORT_NAMES = {
    "tr", "pr", "t", "p", "ct",  # Tekton: TaskRun, PipelineRun, Task, Pipeline, ClusterTask
    "wf", "cwf", "wftmpl", "cwft",  # Argo Workflows
    "app", "appproj",  # Argo CD
    "po", "svc", "deploy", "rs", "ds", "sts", "cm", "ns", "no", "pv", "pvc", "sa", "ev",
    "ep", "ing", "netpol", "pdb", "pc", "sc", "cj", "hpa", "quota", "limits", "crd", "csr",
    "vs", "dr", "gw", "se",  # Istio
    "ks", "hr",  # Flux: Kustomization, HelmRelease
}  # fmt: skip


def test_short_names_are_not_claimed_by_well_known_kinds() -> None:
    import yaml

    for name, text in render().items():
        crd = yaml.safe_load(text)
        short = set(crd["spec"]["names"].get("shortNames") or [])
        assert not short & CLAIMED_SHORT_NAMES, (name, short & CLAIMED_SHORT_NAMES)
    teamrun = yaml.safe_load(render()["teamruns.oma.dev.yaml"])
    assert teamrun["spec"]["names"]["shortNames"] == ["omatr"]


def _undescribed(node: object, path: str) -> list[str]:
    if not isinstance(node, dict):
        return []
    missing: list[str] = []
    for name, sub in (node.get("properties") or {}).items():
        if "description" not in sub:
            missing.append(f"{path}.{name}")
        missing += _undescribed(sub, f"{path}.{name}")
    missing += _undescribed(node.get("items"), f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        missing += _undescribed(node["additionalProperties"], f"{path}{{}}")
    return missing


def test_kubectl_explain_has_a_description_for_every_field_and_wide_adds_columns() -> None:
    import yaml

    for name, text in render().items():
        version = yaml.safe_load(text)["spec"]["versions"][0]
        assert _undescribed(version["schema"]["openAPIV3Schema"], "") == [], name
        wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
        assert wide, f"{name}: kubectl get -o wide would add no column"
