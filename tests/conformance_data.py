"""Files written by the TypeScript implementation (``shared/conformance/oma-ts``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def conformance_dir() -> Path:
    shared = Path(os.environ.get("OMA_SHARED_DIR", REPO_ROOT.parent / "shared"))
    return shared / "conformance" / "oma-ts"


def require_conformance_dir() -> Path:
    directory = conformance_dir()
    if not (directory / "MANIFEST.md").is_file():
        message = f"TypeScript conformance data not found at {directory} (set OMA_SHARED_DIR)"
        # CI always has shared/ beside the clone, and a run that asks for every real part
        # (OMA_REQUIRE_SERVERS) asks for this one too: missing is a failure there.
        if os.environ.get("CI") or os.environ.get("OMA_REQUIRE_SERVERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return directory


def load_json(name: str) -> Any:
    return json.loads((require_conformance_dir() / name).read_text(encoding="utf-8"))


def store_files() -> list[Path]:
    directory = conformance_dir()
    return sorted(directory.glob("*.store.json")) if directory.is_dir() else []
