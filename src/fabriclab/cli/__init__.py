"""The ``fabriclab`` command line, one module per command group (see :mod:`.app`)."""

from .app import app, main

__all__ = ["app", "main"]
