"""``python -m oma`` is the ``oma`` command."""

from oma.cli import main

main()
