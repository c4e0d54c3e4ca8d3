"""The TypeScript conformance data is where the tests look for it (required under CI)."""

from __future__ import annotations

from tests.conformance_data import require_conformance_dir, store_files


def test_conformance_data_is_found() -> None:
    directory = require_conformance_dir()
    assert (directory / "e-approval-hash-vectors.json").is_file()
    assert len(store_files()) >= 16
