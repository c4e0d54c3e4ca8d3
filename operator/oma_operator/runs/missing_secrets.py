"""Which Secrets (or keys) a runner pod needs that its namespace lacks, read from the API: the
kubelet's own message names them only on a quiet node (``rules.pod_secrets``)."""

from __future__ import annotations

from oma_operator import runtime
from oma_operator.k8s.errors import KubeError
from oma_operator.resources.bodies import PodBody
from oma_operator.runs.rules.pod_secrets import missing_secrets, secret_refs


async def missing_secrets_of(pod: PodBody) -> str:
    """What is missing ('' when nothing is, or when the operator may not read a Secret)."""
    namespace = pod["metadata"]["namespace"]
    refs = secret_refs(pod)
    keys: dict[str, frozenset[str] | None] = {}
    for name in dict.fromkeys(ref.name for ref in refs):
        try:
            keys[name] = await runtime.kube().secret_keys(namespace, name)
        except KubeError:  # not allowed to read it, say: the kubelet's word stands alone
            continue
    return missing_secrets(refs, keys)
