"""``python -m fabriclab.cli``: the ``fabriclab`` command."""

from .app import main

main()
