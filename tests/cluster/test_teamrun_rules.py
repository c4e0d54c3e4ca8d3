"""API-server rules of TeamRun that protect a run's identity (CEL in the generated CRD)."""

from __future__ import annotations

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from tests.cluster.operator_kit import TEAMRUNS, crds_installed, teamrun

__all__ = ["crds_installed"]
pytestmark = pytest.mark.cluster


@pytest.mark.timeout(60)
async def test_run_id_cannot_be_added_or_removed_after_creation(
    kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """A runId added later would start a second run beside the checkpointed one (the default
    run id is <namespace>.<name>) and repeat its side effects; removing it would too."""
    unnamed = teamrun("unnamed", [{"text": "x"}])
    del unnamed["spec"]["runId"]
    await kube.create(TEAMRUNS.format(ns=namespace), unnamed)
    with pytest.raises(ApiError) as added:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/unnamed", {"spec": {"runId": "new"}})
    assert added.value.status == 422 and "runId is immutable" in str(added.value)

    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("named", [{"text": "x"}]))
    with pytest.raises(ApiError) as removed:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/named", {"spec": {"runId": None}})
    assert removed.value.status == 422 and "cannot be set, changed or removed" in str(removed.value)
    # Other fields stay editable (the rule is about the run's identity only).
    await kube.patch(
        f"{TEAMRUNS.format(ns=namespace)}/named", {"spec": {"retryPolicy": {"maxFailures": 2}}}
    )
