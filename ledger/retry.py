"""Retry of a command whose transaction PostgreSQL aborted to break a deadlock.

Two commands on the same slot can take the same rows in different orders (a
``supersede`` locks its target first, then the slot; a write locks the slot in id
order). PostgreSQL then aborts one of them with ``deadlock_detected`` (40P01); nothing
of it was committed, and the PostgreSQL manual asks applications to retry such
transactions ("Serialization Failure Handling", chapter 13 of the manual, which also
covers ``serialization_failure``, 40001). The retried command runs again from the
start, so it sees what the other one committed.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from psycopg import errors

from ledger.errors import NotWrittenError

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

ATTEMPTS = 4
"""How many times a command runs at most."""

BACKOFF_S = 0.05
"""Base wait before a retry, in seconds; attempt n waits up to n times this, jittered."""

RETRIED = (errors.DeadlockDetected, errors.SerializationFailure)


def _aborted(exc: BaseException) -> bool:
    """PostgreSQL aborted the transaction to break a deadlock or a serialization failure
    (raised as it is, or as the ``NotWrittenError`` a command reports it with)."""
    return isinstance(exc, RETRIED) or (isinstance(exc, NotWrittenError) and isinstance(exc.__cause__, RETRIED))


def retry_aborted(func: Callable[P, R]) -> Callable[P, R]:
    """Run ``func`` again (at most ``ATTEMPTS`` times in all) when PostgreSQL aborted
    its transaction with a deadlock or serialization failure; the last attempt's failure
    is raised as it is. ``func`` must be safe to run again after such a failure: what it
    committed before (a sweep commits subject by subject) is simply found done."""

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, ATTEMPTS):
            try:
                return func(*args, **kwargs)
            except (*RETRIED, NotWrittenError) as exc:
                if not _aborted(exc):
                    raise
                cause = exc if isinstance(exc, RETRIED) else exc.__cause__
                log.warning(
                    "%s: %s; running it again (attempt %d)", func.__name__, getattr(cause, "sqlstate", exc), attempt + 1
                )
                time.sleep(random.uniform(0, BACKOFF_S * attempt))
        return func(*args, **kwargs)

    return run
