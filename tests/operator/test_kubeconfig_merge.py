"""``$KUBECONFIG`` with several files merges as kubectl merges it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from oma_operator.k8s.kubeconfig import KubeconfigError, merged


def _write(path: Path, config: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def test_first_file_wins_per_entry_and_for_the_current_context(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = _write(
        tmp_path / "a" / "config",
        {
            "clusters": [
                {
                    "name": "k",
                    "cluster": {"server": "https://one", "certificate-authority": "ca.pem"},
                }
            ],
            "users": [
                {"name": "u", "user": {"exec": {"command": "./plugin", "apiVersion": "v1"}}},
                {"name": "p", "user": {"exec": {"command": "aws", "apiVersion": "v1"}}},
            ],
        },
    )
    second = _write(
        tmp_path / "second",
        {
            "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": "https://two"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        },
    )
    third = _write(tmp_path / "third", {"current-context": "later"})
    config = merged([first, tmp_path / "missing", second, third])
    assert config["current-context"] == "c"  # the first file that sets one (not the first file)
    (cluster,) = config["clusters"]
    assert cluster["cluster"]["server"] == "https://one"
    assert cluster["cluster"]["certificate-authority"] == str(tmp_path / "a" / "ca.pem")
    users = {u["name"]: u["user"]["exec"]["command"] for u in config["users"]}
    assert users == {"u": str(tmp_path / "a" / "plugin"), "p": "aws"}  # a name stays a name


def test_no_file_or_a_broken_one_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="no kubeconfig at"):
        merged([tmp_path / "none"])
    broken = tmp_path / "broken"
    broken.write_text("- a list")
    with pytest.raises(KubeconfigError, match="is not a kubeconfig"):
        merged([broken])
    nameless = _write(tmp_path / "nameless", {"users": [{"user": {}}]})
    with pytest.raises(KubeconfigError, match="has no name"):
        merged([nameless])
