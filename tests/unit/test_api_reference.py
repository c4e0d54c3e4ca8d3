"""The Python API reference builds without a warning and shows every public name
(``hack/api-reference``, pdoc over the docstrings)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from api_reference import MODULES, build


@pytest.mark.timeout(300)
def test_the_reference_builds_without_warnings_and_names_every_public_name(
    tmp_path: Path,
) -> None:
    assert build(tmp_path) == []
    for name in MODULES:
        page = tmp_path.joinpath(*name.split(".")).with_suffix(".html")
        text = page.read_text(encoding="utf-8")
        module = importlib.import_module(name)
        missing = [n for n in module.__all__ if not n.startswith("__") and f'id="{n}"' not in text]
        assert missing == [], (name, missing)
