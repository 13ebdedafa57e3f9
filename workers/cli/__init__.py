"""``memledger``, the command line: ``app`` is the typer application, ``main`` the
console entry point. ``root`` holds the app, its global options and the memory
commands; ``bench``, ``data``, ``erasure``, ``evaluation``, ``ops``, ``verify`` and
``versions`` one group of commands each; ``util`` what they share."""

from workers.cli.root import app, main

__all__ = ["app", "main"]
