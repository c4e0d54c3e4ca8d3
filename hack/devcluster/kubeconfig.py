"""Write kubeconfig files, and read the parts of one that a client needs."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class KubeConfig:
    """Server address and credentials of one kubeconfig context."""

    server: str
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    insecure: bool = False
    path: Path | None = None

    def ssl_context(self) -> ssl.SSLContext | bool:
        """TLS settings for httpx: verify against the CA and present the client cert."""
        if not self.server.startswith("https://"):
            return False
        ctx = ssl.create_default_context()
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_pem is not None:
            ctx.load_verify_locations(cadata=self.ca_pem.decode())
        if self.cert_pem is not None and self.key_pem is not None:
            # ssl wants files; keep them only as long as loading takes.
            with tempfile.TemporaryDirectory(prefix="devcluster-tls-") as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(self.cert_pem)
                key.write_bytes(self.key_pem)
                ctx.load_cert_chain(cert, key)
        return ctx


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    cert_pem: bytes,
    key_pem: bytes,
    cluster: str = "devcluster",
) -> Path:
    """A self-contained kubeconfig (certificates embedded) with one context."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def _named(items: list[dict[str, Any]], name: str, kind: str) -> dict[str, Any]:
    for item in items:
        if item.get("name") == name:
            inner = item.get(kind)
            return inner if isinstance(inner, dict) else {}
    raise ValueError(f"kubeconfig has no {kind} named {name!r}")


def _material(section: dict[str, Any], field: str, base: Path) -> bytes | None:
    data = section.get(f"{field}-data")
    if data:
        return base64.b64decode(data)
    file = section.get(field)
    if file:
        p = Path(os.path.expanduser(str(file)))
        return (p if p.is_absolute() else base / p).read_bytes()
    return None


def load_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConfig:
    """Read ``path`` (default: first file of ``$KUBECONFIG``, else ~/.kube/config).

    Meant for the kubeconfigs devcluster writes (tokens, client certificates): it reads one
    file and refuses exec credential plugins. A user's cluster is reached with the product's
    client instead (``oma_operator.k8s.client.Kube``; the tests: ``tests/cluster/kube_access.py``),
    which merges several files and runs exec plugins."""
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        first = env.split(os.pathsep)[0] if env else ""
        path = Path(first) if first else Path.home() / ".kube" / "config"
    doc: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ValueError(f"{path}: no current-context")
    ctx = _named(doc.get("contexts") or [], ctx_name, "context")
    cluster = _named(doc.get("clusters") or [], ctx["cluster"], "cluster")
    user = _named(doc.get("users") or [], ctx["user"], "user") if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise ValueError(
            f"{path}: exec/auth-provider credentials are not supported by devcluster's client "
            "(use oma_operator.k8s.client.Kube)"
        )
    base = path.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    return KubeConfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=_material(cluster, "certificate-authority", base),
        cert_pem=_material(user, "client-certificate", base),
        key_pem=_material(user, "client-key", base),
        token=token,
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        path=path,
    )
