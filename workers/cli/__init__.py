"""``memledger``, the command line: ``app`` is the typer application, ``main`` the
console entry point. ``root`` holds the app, its global options and the memory
commands; ``agents``, ``bench``, ``data``, ``erasure``, ``evaluation``, ``ops``, ``serving``,
``verify`` and ``versions`` one group of commands each; ``util`` what they share.

While ``memledger serve`` owns the data directory, ``main`` sends the command there
(``workers.serve.forward``) before it imports the commands and their stores."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point: the command goes through a running ``memledger serve`` of
    its data directory, or runs here (``workers.cli.root.main``)."""
    from workers import interrupts

    interrupts.install()  # first: a SIGTERM while the commands are imported would kill the process unsaid
    try:
        from workers.serve.forward import maybe_forward

        forwarded = maybe_forward(sys.argv[1:])
        if forwarded is None:
            from workers.cli.root import main as run_here
    except KeyboardInterrupt:
        signum = interrupts.received() or signal.SIGINT
        from workers.serve import forward

        print(interrupts.last_line(signum, forward.sent[0] if forward.sent else None), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # nothing started yet to clean up; sys.exit here, an import cut short, sometimes ended
        # the process by SIGINT instead (the interpreter's exit for an unhandled interruption)
        os._exit(128 + signum)
    if forwarded is not None:
        sys.exit(forwarded)
    run_here()


def __getattr__(name: str) -> Any:
    if name == "app":
        from workers.cli.root import app

        return app
    raise AttributeError(name)
