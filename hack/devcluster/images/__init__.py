"""Images for a real node, made here (no registry is reachable) and imported into containerd.

``pause`` (the pod sandbox, a static C program) and ``busybox`` (Debian's static busybox) are
written as OCI archives directly: one layer, reproducible bytes, so the digest is the cache key.
Other images (``localhost/oma:dev`` from ``hack/build-image``) come from podman's storage as
docker archives. A node's containerd keeps what it imported between runs; ``ensure_imported``
imports only what is missing or changed, so a warm start costs a ``ctr images ls``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from devcluster.errors import StartupError

HERE = Path(__file__).resolve().parent
PAUSE_IMAGE = "localhost/omak/pause:1"
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"
OMA_IMAGE = "localhost/oma:dev"
BUSYBOX_BINARY = Path("/bin/busybox")
BUSYBOX_APPLETS = ("sh", "sleep", "echo", "cat", "dd", "true", "false", "ls", "kill", "env")


@dataclass(frozen=True)
class ImageSource:
    """One image to import: its name in containerd, a key that changes with its content, and
    how to write its archive."""

    name: str
    key: str
    archive: Path


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(info)
    return out.getvalue()


def write_oci_archive(path: Path, name: str, layer: bytes, entrypoint: list[str]) -> str:
    """A one-layer linux/amd64 OCI image archive for ``ctr images import``; returns its
    manifest digest."""
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"], "User": "0"},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _sha(layer),
                    "size": len(layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    entries = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": index,
        **{f"blobs/sha256/{_sha(b)[7:]}": b for b in (config, manifest, layer)},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for entry, data in entries.items():
            info = tarfile.TarInfo(entry)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return _sha(manifest)


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StartupError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def pause_image(cache: Path) -> ImageSource:
    source = HERE / "pause.c"
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    archive = cache / f"pause-{key}.tar"
    if not archive.is_file():
        if shutil.which("gcc") is None:
            raise StartupError("building the pause image needs gcc (Debian package gcc)")
        binary = cache / f"pause-{key}"
        cache.mkdir(parents=True, exist_ok=True)
        _run("gcc", "-static", "-Os", "-s", "-o", str(binary), str(source))
        layer = _layer({"pause": (binary.read_bytes(), 0o755)}, {})
        write_oci_archive(archive, PAUSE_IMAGE, layer, ["/pause"])
    return ImageSource(PAUSE_IMAGE, key, archive)


def busybox_image(cache: Path) -> ImageSource:
    if not BUSYBOX_BINARY.is_file():
        raise StartupError(f"{BUSYBOX_BINARY} is missing (Debian package busybox-static)")
    data = BUSYBOX_BINARY.read_bytes()
    key = hashlib.sha256(data).hexdigest()[:16]
    archive = cache / f"busybox-{key}.tar"
    if not archive.is_file():
        links = {f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS}
        layer = _layer({"bin/busybox": (data, 0o755), "tmp/.keep": (b"", 0o644)}, links)
        write_oci_archive(archive, BUSYBOX_IMAGE, layer, ["/bin/sh"])
    return ImageSource(BUSYBOX_IMAGE, key, archive)


def podman_image(cache: Path, name: str) -> ImageSource | None:
    """``name`` from podman's storage (the one ``hack/build-image`` uses), or None if absent."""
    if shutil.which("podman") is None:
        return None
    podman = ("podman", "--storage-driver", "vfs")
    try:
        ident = (_run(*podman, "image", "inspect", "--format", "{{.Id}}", name)).strip()
    except StartupError:
        return None
    archive = cache / f"podman-{ident[:16]}.tar"
    if not archive.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(".partial")
        _run(*podman, "save", "--format", "docker-archive", "-o", str(partial), name)
        partial.rename(archive)
        prune_archives(cache, keep=archive)
    return ImageSource(name, ident[:16], archive)


ARCHIVES_KEPT = 3  # the newest podman archives, besides the one just written
ARCHIVE_MAX_AGE_S = 2 * 3600  # younger ones may be about to be imported by a start under way


def prune_archives(cache: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Delete the podman archives of older builds (one per image built, ~470 MB each): all but
    ``keep`` and the ``ARCHIVES_KEPT`` newest, and only those over ``ARCHIVE_MAX_AGE_S`` old.
    Returns what was deleted."""
    moment = time.time() if now is None else now
    found = sorted(cache.glob("podman-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    older = [p for p in found if p != keep][ARCHIVES_KEPT:]
    deleted = []
    for path in older:
        if moment - path.stat().st_mtime > ARCHIVE_MAX_AGE_S:
            path.unlink(missing_ok=True)
            deleted.append(path)
    return deleted


def ensure_imported(ctr: tuple[str, ...], stamps: Path, images: list[ImageSource]) -> None:
    """Import into one containerd (``ctr`` is its command prefix) what it lacks."""
    listed = set((_run(*ctr, "images", "ls", "-q")).split())
    done: dict[str, str] = json.loads(stamps.read_text()) if stamps.is_file() else {}
    for image in images:
        if image.name in listed and done.get(image.name) == image.key:
            continue
        _run(*ctr, "images", "import", str(image.archive))
        done[image.name] = image.key
        stamps.write_text(json.dumps(done))
