"""Idempotency keys: a retried request returns the first result instead of acting again.

The first request with a key takes a PostgreSQL session advisory lock on
``(principal, key)`` on a connection of its own, finds no row, runs, and stores
``(principal, key, fingerprint, result)`` before the response is sent; then it lets the
lock go. A concurrent request with the same key waits for that lock (polling, so that it
holds no snapshot meanwhile) and then reads the stored result; if the first one failed,
nothing was stored and the retry runs afresh; a process that dies holding the lock loses
it with its connection. No transaction stays open while the command runs: an erasure's
rewrite of the key store waits for every snapshot older than the erase
(``ledger.pgschema.wait_for_older_snapshots``), and one held by the request itself would
make it wait in vain. A request with a known key and another fingerprint (another
method, path or body) is refused, naming the header (422, as the IETF draft "The
Idempotency-Key HTTP Header Field", draft-ietf-httpapi-idempotency-key-header, answers a
reused key with another payload). A process killed between the ledger's commit and this
row's commit (the client got no answer) runs the command again on a retry: for a write
the ledger's own rules make it a no-op answering the first attempt's memory when it
names a turn or tool call id (``ledger.admission``), else a reinforcement of the same
statement, not a second memory.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from contracts import utc_now
from workers.gateway.errors import InvalidRequestError, UnavailableError

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
LOCK_WAIT_S = 30.0
"""How long a request waits for another request with the same key to finish, seconds."""
LOCK_POLL_S = 0.02

M = TypeVar("M", bound=BaseModel)


def fingerprint(method: str, path: str, body: object, keyed_hash: Callable[[str], str]) -> str:
    """``keyed_hash`` (the keyring's HMAC-SHA256, ``ledger.crypto.Keyring.fingerprint``)
    of the method, the path and the body as canonical JSON: keyed, so that the record of
    a request whose body held a memory's text confirms no guess of that text to a
    reader of the table without the master key."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return keyed_hash(f"{method.upper()}\n{path}\n{canonical}")


class IdempotencyStore:
    """The ``idempotency_keys`` table (``workers.gateway.schema``)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def once(
        self,
        principal: str,
        key: str,
        print_: str,
        run: Callable[[], M],
        model: type[M],
        record: Callable[[M], M] | None = None,
        replay: Callable[[M], M] | None = None,
    ) -> M:
        """``run()``'s result, or the result stored for ``key`` by an earlier request of
        ``principal`` with the same fingerprint ``print_``. ``record`` makes what is stored
        of a result (default: all of it; a result that holds memory content must be
        stored without it, so that no erasure leaves it here), ``replay`` the answer to a
        retry from what was stored (default: that).

        Raises:
            InvalidRequestError: ``key`` is not 1 to 255 visible ASCII characters, or
                was used for a request with another fingerprint.
            UnavailableError: another request with the same key is still running after
                ``LOCK_WAIT_S`` seconds.
            Whatever ``run`` raises (nothing is stored then).
        """
        if _KEY.match(key) is None:
            raise InvalidRequestError(HEADER, "must be 1 to 255 visible ASCII characters")
        name = _lock_name(principal, key)
        with self._pool.connection() as conn:
            self._lock(conn, name)
            try:
                with conn.transaction():
                    row = conn.execute(
                        "SELECT fingerprint, response FROM idempotency_keys WHERE principal = %s AND idem_key = %s",
                        (principal, key),
                    ).fetchone()
                if row is not None:
                    if row[0] != print_:
                        raise InvalidRequestError(
                            HEADER, "was already used for a different request (method, path or body)"
                        )
                    stored = model.model_validate(row[1])
                    return stored if replay is None else replay(stored)
                result = run()
                kept = result if record is None else record(result)
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO idempotency_keys (principal, idem_key, fingerprint, response, created_at)"
                        " VALUES (%s, %s, %s, %s, %s)",
                        (principal, key, print_, Jsonb(kept.model_dump(mode="json")), utc_now()),
                    )
                return result
            finally:
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,))
                except psycopg.OperationalError:
                    pass  # the connection is gone, and the session's lock with it (the pool drops it)

    def _lock(self, conn: psycopg.Connection, name: str) -> None:
        """Take the session advisory lock ``name`` (``_lock_name``) on ``conn``, trying every
        ``LOCK_POLL_S`` seconds for at most ``LOCK_WAIT_S``; each try is a transaction of
        its own, so no snapshot stays open while the holder runs.

        Raises:
            UnavailableError: another request with the key held it for ``LOCK_WAIT_S``.
        """
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            with conn.transaction():
                got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (name,)).fetchone()
            if got is not None and got[0]:
                return
            if time.monotonic() >= deadline:
                raise UnavailableError(
                    HEADER, f"busy: a request with this key has been running for over {LOCK_WAIT_S:g} s", 1.0
                )
            time.sleep(LOCK_POLL_S)


def _lock_name(principal: str, key: str) -> str:
    """The advisory lock's name of an idempotency key: a JSON array, so that no two
    ``(principal, key)`` pairs share a name."""
    return json.dumps(["idempotency", principal, key])
