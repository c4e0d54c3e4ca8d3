"""Several kubeconfig files merged into one, as kubectl merges ``$KUBECONFIG``.

kubectl's rules (``clientcmd``): files are read in order; for clusters, users and contexts the
first file that names an entry wins, and so does the first file that sets ``current-context``.
A relative file path in an entry (a CA, a client certificate or key, an exec plugin given as a
path) is relative to the file that holds the entry, so it is made absolute here. kr8s reads a
list of files too, but takes the current context from the first file only; given the merged
document it follows kubectl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_SECTIONS = ("clusters", "users", "contexts")
_PATH_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


class KubeconfigError(ValueError):
    pass


def merged(paths: list[Path]) -> dict[str, Any]:
    """The merged kubeconfig of the files in ``paths`` that exist (at least one must)."""
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    seen: dict[str, set[str]] = {section: set() for section in _SECTIONS}
    found = False
    for path in paths:
        if not path.is_file():
            continue
        found = True
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeconfigError(f"cannot read kubeconfig {path}: {exc}") from exc
        if not isinstance(config, dict):
            raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig")
        if "current-context" not in document and config.get("current-context"):
            document["current-context"] = config["current-context"]
        for section in _SECTIONS:
            for entry in config.get(section) or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise KubeconfigError(f"kubeconfig {path}: an entry of {section} has no name")
                if entry["name"] in seen[section]:
                    continue
                seen[section].add(entry["name"])
                document.setdefault(section, []).append(_absolute(entry, section, path.parent))
    if not found:
        raise KubeconfigError(f"no kubeconfig at {':'.join(str(p) for p in paths)}")
    return document


def _absolute(entry: dict[str, Any], section: str, folder: Path) -> dict[str, Any]:
    inner_key = section[:-1]  # clusters -> cluster, users -> user, contexts -> context
    inner = dict(entry.get(inner_key) or {})
    for field in _PATH_FIELDS.get(section, ()):
        value = inner.get(field)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            inner[field] = str(folder / value)
    plugin = inner.get("exec")
    if isinstance(plugin, dict) and isinstance(plugin.get("command"), str):
        command = plugin["command"]
        if "/" in command and not Path(command).is_absolute():  # a path, not a name on $PATH
            inner["exec"] = {**plugin, "command": str(folder / command)}
    return {**entry, inner_key: inner}
