"""A projection process that dies hard (``os._exit``, as SIGKILL would leave it) right
after its store write for an erasure and before its position (and receipt) commit.

Run as ``python -m tests.integration.crash_worker PROJECTION`` with the ``MEMLEDGER_*``
environment of the services. Exit status 137 means it died at the injected point; 0
means it caught up without meeting an erasure.

- facts, summaries (Postgres): the erasure's rows are deleted and its receipt written
  inside the batch's transaction, then the process exits before the commit: Postgres
  rolls the whole transaction back when the connection drops.
- vectors: the index points are deleted inside the batch's transaction (receipt and
  positions are written in it), then the process exits before the commit.
- cache: the cache entries are dropped, then the process exits before
  ``commit_positions`` stores the receipt and positions.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from contracts import ErasureRequested, Event
from ledger.eventlog import LogPosition
from workers.bootstrap import build

CRASHED = 137


def main(name: str) -> int:
    svc = build(projections=(name,))
    projection: Any = svc.projections[name]
    if name in ("facts", "summaries", "vectors"):
        apply_events = projection._apply_events

        def crash_after_apply(conn: Any, todo: Sequence[tuple[Event, LogPosition]], *args: Any) -> None:
            apply_events(conn, todo, *args)
            if any(isinstance(e, ErasureRequested) for e, _ in todo):
                sys.stdout.flush()
                os._exit(CRASHED)  # inside the open transaction (vectors: after the index writes)

        projection._apply_events = crash_after_apply
    else:
        commit = projection.commit_positions

        def crash_before_commit(applied: Sequence[tuple[Event, LogPosition]], *args: Any) -> None:
            if any(isinstance(e, ErasureRequested) for e, _ in applied):
                os._exit(CRASHED)  # the store writes are done; receipt and positions are not
            commit(applied, *args)

        projection.commit_positions = crash_before_commit
    svc.runner(name).catch_up(svc.log)
    svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
