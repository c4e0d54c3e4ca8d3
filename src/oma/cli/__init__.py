"""The ``oma`` command line: ``app`` (typer) and ``main``, the console script.

One module per command group: ``run`` (``oma run``), ``checkpoint`` (``oma checkpoint ...``, its
text report in ``checkpoint_text``), ``approvals`` (``oma approvals ...``), and ``store`` (the
``--store``/``--tenant`` options they share). ``app`` puts them together and loads the commands
of installed plugins (entry point group ``oma.cli``, e.g. ``oma approve`` from the operator).
"""

from oma.cli.app import app, load_plugins, main

__all__ = ["app", "load_plugins", "main"]
