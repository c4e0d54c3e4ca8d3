"""How kopf's own connection reaches the API server: with the credentials of our client.

kr8s (``k8s/client.py``) finds them as kubectl does: in a pod the service account (through the
service address in the pod's environment, not ``kubernetes.default.svc``, which needs cluster
DNS and its domain); elsewhere the kubeconfig with its context, tokens, client certificates and
exec credential plugins. kopf calls this again when the API server answers 401, and each call
authenticates again: a rotated projected token is re-read, an exec plugin run again.
"""

from __future__ import annotations

from typing import Any

import kopf

from oma_operator import runtime


@kopf.on.login()
async def login(**_: Any) -> kopf.ConnectionInfo:
    return await connection_info()


async def connection_info() -> kopf.ConnectionInfo:
    """Our client's credentials, authenticated again (what kopf's own connection uses)."""
    kube = await runtime.connect()
    auth = kube.api.auth
    await auth.reauthenticate()
    return kopf.ConnectionInfo(
        server=auth.server,
        ca_path=str(auth.server_ca_file) if auth.server_ca_file else None,
        insecure=bool(getattr(auth, "_insecure_skip_tls_verify", False)),
        token=auth.token or None,
        certificate_path=str(auth.client_cert_file) if auth.client_cert_file else None,
        private_key_path=str(auth.client_key_file) if auth.client_key_file else None,
        default_namespace=kube.namespace,
    )
