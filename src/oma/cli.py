"""The ``oma`` command line. Commands are added as the features they drive land."""

from __future__ import annotations

import platform

import typer

from oma import __version__

app = typer.Typer(
    name="oma",
    help="Durable multi-agent LLM runs: checkpoints, resume, approvals.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the oma version and the Python it runs on."""
    typer.echo(f"oma {__version__} (Python {platform.python_version()})")


@app.callback()
def _root() -> None:
    """Keeps ``oma version`` a subcommand even while it is the only one."""


def main() -> None:
    app()
