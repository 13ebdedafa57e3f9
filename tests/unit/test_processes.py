"""Whether a pid file's process still runs: a killed process its parent has not reaped
yet (a zombie) does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from workers.processes import alive


def test_a_running_process_is_alive_and_an_unreaped_dead_one_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert alive(child.pid)
        child.kill()
        for _ in range(500):  # the child is a zombie until it is waited for
            if not alive(child.pid):
                break
            time.sleep(0.01)
        assert not alive(child.pid)
        reaped, status = os.waitpid(child.pid, os.WNOHANG)
        assert reaped == child.pid  # it was a zombie, reaped only now
        child.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if alive(child.pid):  # the test failed before the kill
            child.kill()
            child.wait()
    assert alive(os.getpid())
