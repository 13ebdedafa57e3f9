"""The embedded default's projections, run continuously by ``memledger serve``.

A thread applies every live projection version (``Services.catch_up``) whenever the
embedded log grows: an ``AFTER INSERT`` statement trigger on ``memory_events`` sends
``NOTIFY memledger_events``, delivered when the appending transaction commits, and the
thread ``LISTEN``s for it (waking at least every ``idle_s`` seconds anyway). A write is
thus applied within milliseconds, not at the next command. A store that stays down is
retried; nothing is skipped.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from projections.errors import ProjectionStalledError
from projections.runner import RetryPolicy
from workers.bootstrap import Services

log = logging.getLogger(__name__)

CHANNEL = "memledger_events"

TRIGGER_SQL = f"""
CREATE OR REPLACE FUNCTION memledger_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', '');
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER memledger_notify_events AFTER INSERT ON memory_events
  FOR EACH STATEMENT EXECUTE FUNCTION memledger_notify_events();
"""

RETRY = RetryPolicy(initial_s=0.2, max_s=2.0, max_attempts=5)
"""A round gives up on a store after about 4 s and the next round tries again."""


class Projector:
    """Applies ``svc``'s live projections in a background thread until ``stop``."""

    def __init__(self, svc: Services, idle_s: float = 1.0) -> None:
        self.svc = svc
        self.idle_s = idle_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def start(self) -> None:
        """Install the trigger and start the thread (it catches up first)."""
        with self.svc.pool.connection() as conn, conn.transaction():
            conn.execute(TRIGGER_SQL)
        self._thread = threading.Thread(target=self._run, name="memledger-projector", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the thread after the round in progress (at most ``timeout_s`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(str(self.svc.pool.conninfo), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        self._round()
                        for _ in conn.notifies(timeout=self.idle_s, stop_after=1):
                            pass
            except psycopg.Error as exc:
                log.warning("projector: PostgreSQL did not answer (%s); retrying in 1 s", exc)
                self._stop.wait(1.0)

    def _round(self) -> None:
        try:
            self.svc.catch_up(retry=RETRY)
        except (ProjectionStalledError, Exception) as exc:  # a store down: the events stay in the log
            log.warning("projector: %s; the events are in the log, trying again", exc)
            self._stop.wait(1.0)
        self.rounds += 1
