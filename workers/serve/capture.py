"""Per-thread capture of ``sys.stdout`` and ``sys.stderr``, so that ``memledger serve``
can run a CLI command for a forwarding client and send back exactly what it printed,
while its other threads keep writing to the real streams."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_local = threading.local()


class _Switch(io.TextIOBase):
    """Writes to the calling thread's capture buffer when it has one, else to ``real``."""

    def __init__(self, real: TextIO, which: str) -> None:
        self._real = real
        self._which = which

    @property
    def encoding(self) -> str:  # type: ignore[override]  # click uses a stream that has these as it is
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "strict"

    def _target(self) -> Any:
        buffers = getattr(_local, "buffers", None)
        return buffers[self._which] if buffers is not None else self._real

    def write(self, text: str) -> int:
        return int(self._target().write(text))

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return bool(self._target().isatty())

    def fileno(self) -> int:
        if getattr(_local, "buffers", None) is not None:
            raise io.UnsupportedOperation("captured output has no file descriptor")
        return self._real.fileno()


def install() -> None:
    """Replace ``sys.stdout`` and ``sys.stderr`` with switches (once per process)."""
    if not isinstance(sys.stdout, _Switch):
        sys.stdout = _Switch(sys.stdout, "out")
    if not isinstance(sys.stderr, _Switch):
        sys.stderr = _Switch(sys.stderr, "err")


@contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Within the block, this thread's prints go to two buffers (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    _local.buffers = {"out": out, "err": err}
    try:
        yield out, err
    finally:
        _local.buffers = None
