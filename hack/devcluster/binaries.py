"""Where the binaries built by ``hack/k8s/ensure-binaries`` live."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from devcluster.errors import MissingBinaryError

HACK_DIR = Path(__file__).resolve().parent.parent
VERSIONS_FILE = HACK_DIR / "k8s" / "versions.env"
ENSURE_SCRIPT = HACK_DIR / "k8s" / "ensure-binaries"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")


def k8s_version() -> str:
    """The Kubernetes version pinned in hack/k8s/versions.env."""
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.startswith("K8S_VERSION="):
            return line.split("=", 1)[1].strip()
    raise MissingBinaryError(f"no K8S_VERSION in {VERSIONS_FILE}")


def cache_root() -> Path:
    """``$OMA_K8S_CACHE`` or ``~/.cache/oma/k8s``, as in ensure-binaries."""
    env = os.environ.get("OMA_K8S_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "oma" / "k8s"


def bin_dir() -> Path:
    """``$OMA_K8S_BIN`` if set, else the versioned cache directory."""
    env = os.environ.get("OMA_K8S_BIN")
    return Path(env) if env else cache_root() / k8s_version() / "bin"


def find_binary(name: str) -> Path:
    """The cached binary ``name``; raise with the fix if it is missing."""
    path = bin_dir() / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    raise MissingBinaryError(
        f"{name} not found at {path}: run {ENSURE_SCRIPT} first "
        "(it builds etcd, kube-apiserver, kube-controller-manager, kubectl and helm "
        "into the cache outside the repo)"
    )


def find_tool(name: str) -> Path | None:
    """A client tool (kubectl, helm): the cached build first, then ``PATH``."""
    path = bin_dir() / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    found = shutil.which(name)
    return Path(found) if found else None


def build_times() -> str | None:
    """The last cold build recorded by ensure-binaries (per binary and total), if any."""
    record = cache_root() / k8s_version() / "build-times.txt"
    if not record.is_file():
        return None
    cold = [line for line in record.read_text().splitlines() if line.startswith("cold ")]
    return cold[-1].removeprefix("cold ") if cold else None
