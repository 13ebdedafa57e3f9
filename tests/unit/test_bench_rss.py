"""The benchmarks' memory sampler labels forked children by their title, once they set
it, and tells the deployment's size from the processes started (restarts)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workers.bench.rss import RssSampler, role

# A supervisor that forks one child at a time; each child sets its title once the file
# ``go`` exists and exits once ``stop`` exists, and the supervisor forks the next one.
SUPERVISOR = """
import os, sys, time
from pathlib import Path
from setproctitle import setproctitle
d = Path(sys.argv[1])
for n in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        (d / f"forked-{n}").touch()
        while not (d / f"go-{n}").exists():
            time.sleep(0.01)
        setproctitle("memledger worker facts_v1")
        (d / f"titled-{n}").touch()
        while not (d / f"stop-{n}").exists():
            time.sleep(0.01)
        os._exit(0)
    os.waitpid(pid, 0)
while not (d / "end").exists():
    time.sleep(0.01)
"""


def wait_for_file(path: Path) -> None:
    for _ in range(1000):
        if path.exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"{path.name} never appeared")


@contextmanager
def supervisor(tmp_path: Path, children: int) -> Iterator[subprocess.Popen[bytes]]:
    script = tmp_path / "supervisor.py"  # a file: the title in a ``-c`` command line would label the root
    script.write_text(SUPERVISOR)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(children)])
    try:
        yield proc
    finally:
        (tmp_path / "end").touch()
        for n in range(children):
            (tmp_path / f"go-{n}").touch()
            (tmp_path / f"stop-{n}").touch()
        proc.wait(timeout=10)


def test_a_child_seen_before_its_title_is_labelled_by_the_title() -> None:
    assert role(["python", "-m", "workers", "worker"]) == "supervisor"
    assert role(["memledger worker facts_v1   "]) == "facts_v1"


def test_labels_follow_the_title_and_restarts_are_counted_apart(tmp_path: Path) -> None:
    with supervisor(tmp_path, children=2) as proc:
        sampler = RssSampler([proc.pid])
        wait_for_file(tmp_path / "forked-0")
        sampler.sample()  # the child still has its supervisor's command line
        (tmp_path / "go-0").touch()
        wait_for_file(tmp_path / "titled-0")
        sampler.sample()
        (tmp_path / "stop-0").touch()
        wait_for_file(tmp_path / "forked-1")  # the first child exited, a second one runs
        (tmp_path / "go-1").touch()
        wait_for_file(tmp_path / "titled-1")
        sampler.sample()
        out = sampler.result()
    assert set(out["worker_peak_rss_mb"]) == {"supervisor", "facts_v1"}
    assert out["processes"] == 2 and out["processes_started"] == 3
    assert out["deployment_peak_rss_mb"] > 0
