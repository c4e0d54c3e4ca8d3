"""The ``oma`` command line.

Exit codes (``oma run``, the same table a runner pod exits with, ``oma.pod_contract``): 0
success; 1 transient: the store was unreachable (or another transient error ended the
attempt), run it again; 2 the run did not succeed (a task failed, e.g. its model refused the
request; it was rejected) or bad input (an unreadable or invalid spec, a bad option): the
message says which; 10 the run is suspended waiting for approvals; 12 fenced: a newer attempt
of the same run took over and this process stopped without running further tools; 13 the
checkpoint was lost; 14 the model provider stayed unavailable after the SDK's retries: the run
stopped at its last boundary, run it again once the provider is back; 130 interrupted
(Ctrl-C): run the same command again to resume. An error is printed as ``error: CODE:
message`` (the code of ``docs/errors.md``).
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from oma import __version__
from oma.cli.approvals import app as approvals_app
from oma.cli.checkpoint import app as checkpoint_app
from oma.cli.fork import fork_command
from oma.cli.replay import replay_command
from oma.cli.run import run_command
from oma.cli.verify import verify_command
from oma.errors import CheckpointFencedError, CheckpointLostError, OmaError
from oma.pod_contract import Exit, exit_for_error

app = typer.Typer(
    name="oma",
    help="Durable multi-agent LLM runs: checkpoints, resume, approvals.",
    no_args_is_help=True,
    # typer's --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    add_completion=True,
)


app.add_typer(approvals_app, name="approvals")
app.add_typer(checkpoint_app, name="checkpoint")
app.command("verify")(verify_command)
app.command("fork")(fork_command)
app.command("replay")(replay_command)


@app.command()
def version() -> None:
    """Print the oma version and the Python it runs on."""
    typer.echo(f"oma {__version__} (Python {platform.python_version()})")


def _print_version(given: bool) -> None:
    if given:
        version()
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the oma version and exit (as `oma version`).",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Durable multi-agent LLM runs: checkpoints, resume, approvals."""


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Run spec (YAML or JSON).")],
    run_id: Annotated[
        str | None, typer.Option(help="Run id (default: spec runId or file name).")
    ] = None,
    store: Annotated[
        Path | None, typer.Option(help="File store path (default .oma/<run>.json).")
    ] = None,
    events: Annotated[
        Path | None, typer.Option(help="Append progress events as JSON lines.")
    ] = None,
    expect_checkpoint: Annotated[
        bool,
        typer.Option(
            help="Resume only: an earlier attempt saved a checkpoint, so refuse (exit 13) to "
            "start over without it."
        ),
    ] = False,
) -> None:
    """Run a spec locally; run the same command again after an interruption to resume."""
    console = Console(highlight=False)
    # Errors and the interruption notice go to stderr: stdout is the run's progress and summary.
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        code = run_command(spec, run_id, store, events, console, expect_checkpoint)
    except KeyboardInterrupt:
        errors.print(
            "interrupted: the checkpoint holds everything up to the last boundary; "
            "run the same command again to resume"
        )
        raise typer.Exit(Exit.INTERRUPTED) from None
    except CheckpointLostError as exc:
        errors.print(f"[red]checkpoint lost:[/] {escape(str(exc))}")
        raise typer.Exit(Exit.CHECKPOINT_LOST) from exc
    except CheckpointFencedError as exc:
        errors.print(f"[yellow]fenced:[/] {escape(str(exc))}")
        raise typer.Exit(Exit.FENCED) from exc
    except OmaError as exc:
        again = " (transient: run it again)" if exc.transient else ""
        named = "" if exc.code == OmaError.code else f"{exc.code}: "  # bad input says what
        errors.print(f"[red]error:[/] {named}{escape(str(exc))}{again}")
        raise typer.Exit(exit_for_error(exc)) from exc
    raise typer.Exit(code)


def load_plugins(target: typer.Typer) -> None:
    """Add the commands of installed packages (entry point group ``oma.cli``, each a
    ``register(app)``): e.g. ``oma approve`` comes from the operator package, which the engine
    must not import. A broken plugin costs its commands only, never the whole CLI."""
    for entry in entry_points(group="oma.cli"):
        try:
            entry.load()(target)
        except Exception as exc:
            # One line whatever the exception: its type and the first line of its message.
            reason = next(iter(str(exc).splitlines()), "")
            print(
                f"oma: warning: plugin {entry.name} ({entry.value}) not loaded: "
                f"{type(exc).__name__}{': ' + reason if reason else ''}; its commands are "
                "unavailable (reinstall or remove the package that provides it)",
                file=sys.stderr,
            )


def main() -> None:
    load_plugins(app)
    app()
