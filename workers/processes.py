"""Whether a process is still running (for pid files and lists of users)."""

from __future__ import annotations

import psutil


def alive(pid: int) -> bool:
    """Whether ``pid`` names a running process (another user's counts as running). A
    zombie (a killed process its parent has not reaped yet) is not running: a ``serve``
    killed with SIGKILL is one until its parent waits for it."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process
        return True
