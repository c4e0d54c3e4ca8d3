"""docs/quickstart.md, section 1 ("On your machine"), run as written: its ```bash blocks, in the
doc's order, in a terminal of a user (``tests/quickstart_doc.py``), in a temporary working copy
(``examples/`` copied) so the repository's ``.oma/`` is untouched.

The first command (``python3 -m venv .venv && .venv/bin/pip install -q -e .``) is not run: the
working copy's ``.venv`` is the venv running these tests (hack/test made it the same way), so the
doc's ``export PATH="$PWD/.venv/bin:$PATH"`` is what puts ``oma`` on the terminal's ``PATH``.
"Interrupt it and resume" is done as the doc says, on the first run: Ctrl-C (SIGINT to the
command's process group) once the run has recorded a side effect, then the same command again.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from tests.quickstart_doc import (
    REPO,
    Terminal,
    bash_blocks,
    output_blocks,
    section,
    user_environment,
    without_comment,
)

VENV_STEP = "python3 -m venv .venv && .venv/bin/pip install -q -e ."
RUN = "oma run examples/demo.yaml"


def _ledger(work: Path) -> list[dict[str, object]]:
    path = work / ".oma" / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _state(folder: Path) -> list[tuple[str, int, int]]:
    if not folder.is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_quickstart_on_your_machine(tmp_path: Path) -> None:
    text = section(1)
    first, show, again = bash_blocks(text)
    (resuming,) = output_blocks(text)  # what the second start prints after a Ctrl-C
    assert first == [VENV_STEP, 'export PATH="$PWD/.venv/bin:$PATH"', RUN], first

    repo_state = _state(REPO / ".oma")
    work = tmp_path / "oma"
    shutil.copytree(REPO / "examples", work / "examples")
    (work / ".venv").symlink_to(sys.prefix)  # the doc's venv step, done by hack/test
    venv_bin = Path(sys.prefix) / "bin"
    env = user_environment(tmp_path / "home", tmp_path, drop_from_path=(venv_bin,))
    env["PYTHONUNBUFFERED"] = "1"
    terminal = Terminal("1", work, env, tmp_path)
    terminal.run(first[1])
    assert Path(terminal.env["PATH"].split(":")[0]).resolve() == venv_bin.resolve()

    # The run, interrupted with Ctrl-C once it has recorded a side effect (exit 130) ...
    log = tmp_path / "interrupted.out"
    begin = time.monotonic()
    interrupted = terminal.start(first[2], log)
    while not _ledger(work) and interrupted.poll() is None and time.monotonic() - begin < 60:
        time.sleep(0.02)
    assert _ledger(work), log.read_text()
    Terminal.interrupt(interrupted)
    assert interrupted.wait(timeout=60) == 130, log.read_text()
    assert "status ok" not in log.read_text()
    # ... then the same command again: it resumes, ends ok, as attempt 2.
    resumed = terminal.run(first[2])
    assert resuming.strip() in resumed.stdout, resumed
    assert "run demo · attempt 2" in resumed.stdout, resumed
    assert resumed.stdout.rstrip().splitlines()[-1].startswith("status ok"), resumed
    # One ledger line per logical tool call, keyed run_id:task_id:tool_call_id.
    entries = _ledger(work)
    keys = [str(entry["key"]) for entry in entries]
    assert len(keys) == len(set(keys)) == 3, entries
    assert sorted(key.split(":")[2] for key in keys) == ["draft-1", "fact-1", "fact-2"], keys
    assert all(key.startswith("demo:") for key in keys), keys

    # Look at the checkpoint: the run, its attempts, its tasks; then the same as JSON.
    show = [without_comment(command) for command in show]
    assert show == ["oma checkpoint show --run-id demo", "oma checkpoint show --run-id demo --json"]
    shown = terminal.run(show[0]).stdout
    assert shown.startswith("run       demo  (attempt 2, snapshot v4"), shown
    assert "status    succeeded  (attempt 2" in shown and "tasks     3: 3 completed" in shown
    assert "#2  " in shown and "resumed" in shown, shown
    data = json.loads(terminal.run(show[1]).stdout)
    assert data["runId"] == "demo" and data["attempt"] == 2, data
    assert data["taskCounts"] == {"completed": 3}, data
    assert (work / ".oma" / "demo.json").is_file()  # the file store the doc names

    # From scratch: the checkpoint deleted, the run starts again at attempt 1.
    assert again == ["oma checkpoint delete --run-id demo --yes && oma run examples/demo.yaml"]
    fresh = terminal.run(again[0]).stdout
    assert "oma run demo: starting (store .oma/demo.json)" in fresh, fresh
    assert "run demo · attempt 1" in fresh and "resuming" not in fresh, fresh
    assert fresh.rstrip().splitlines()[-1].startswith("status ok"), fresh
    assert len(_ledger(work)) == 3  # the same logical calls: still one line each
    assert _state(REPO / ".oma") == repo_state  # the repository's own .oma/ is untouched
