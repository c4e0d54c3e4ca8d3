"""The README's example runs as written (docs that match the code)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    first = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert first.stdout.strip() == "ok 1 charged"
    again = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert again.stdout.strip() == "ok 2 charged"  # the second run restores the finished run


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].endswith("oma run examples/demo.yaml")
    assert block[1].startswith("hack/test")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec hack/test" in ci
