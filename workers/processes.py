"""Whether a process is still running (for pid files and lists of users)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether ``pid`` names a running process (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
