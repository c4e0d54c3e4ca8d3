"""How kopf's own connection reaches the API server: in a pod the same way as client.py.

kopf's built-in service-account login dials ``https://kubernetes.default.svc``, which fails where
pods have no cluster DNS or another cluster domain, while our client (like client-go) uses the
service address in the pod's environment. One address for both. Outside a pod, the kubeconfig.
kopf calls this again when the API server answers 401, so a rotated projected token is re-read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

from oma_operator.client import SA_DIR, in_cluster_server


def service_account_login(environ: Mapping[str, str], account: Path) -> kopf.ConnectionInfo | None:
    server = in_cluster_server(environ, account)
    if server is None:
        return None
    namespace = account / "namespace"
    ca = account / "ca.crt"
    return kopf.ConnectionInfo(
        server=server,
        ca_path=str(ca) if ca.exists() else None,
        token=(account / "token").read_text().strip() or None,
        default_namespace=namespace.read_text().strip() if namespace.exists() else None,
    )


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return service_account_login(os.environ, SA_DIR) or kopf.login_with_kubeconfig(**kwargs)
