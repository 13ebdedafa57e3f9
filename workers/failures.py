"""Which errors are a store's failure rather than a refusal of the input or a bug: one
rule for every entry point (the CLI's exit status 1, the live workers' one-line exit)."""

from __future__ import annotations

import psycopg
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ledger.errors import EventLogError, TopicMisconfiguredError


def store_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a store's failure: PostgreSQL unreachable or its connection lost
    (``psycopg.OperationalError``, a pool timeout and a backend terminated by an
    administrator included), Redis unreachable, the log unreachable (``EventLogError``,
    but a topic's wrong settings, which are a refusal of the configuration)."""
    if isinstance(exc, TopicMisconfiguredError):
        return False
    return isinstance(exc, psycopg.OperationalError | RedisConnectionError | RedisTimeoutError | EventLogError)


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (libpq's messages have several), its type when it has
    none."""
    return " ".join(str(exc).split()) or type(exc).__name__
