"""The TypeScript conformance files are skipped only where nobody asked for every real part:
under CI or OMA_REQUIRE_SERVERS=1 a missing folder fails the run instead of skipping silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance_data import require_conformance_dir


@pytest.mark.parametrize(
    ("env", "outcome"),
    [
        ({"CI": "true"}, pytest.fail.Exception),
        ({"OMA_REQUIRE_SERVERS": "1"}, pytest.fail.Exception),
        ({}, pytest.skip.Exception),
    ],
)
def test_a_missing_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], outcome: type
) -> None:
    monkeypatch.setenv("OMA_SHARED_DIR", str(tmp_path / "nowhere"))
    for name in ("CI", "OMA_REQUIRE_SERVERS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(outcome, match="conformance data not found"):
        require_conformance_dir()
