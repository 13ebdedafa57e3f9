"""Idempotency keys: a retried request returns the first result instead of acting again.

The first request with a key inserts ``(principal, key, fingerprint)`` and runs, inside
one transaction on a connection of its own: its result is stored in that transaction,
which commits before the response is sent. A concurrent request with the same key waits
on that row (PostgreSQL's unique index) and then reads the stored result; if the first
one failed, its row was rolled back and the retry runs afresh. A request with a known
key and another fingerprint (another method, path or body) is refused, naming the
header (422, as the IETF draft "The Idempotency-Key HTTP Header Field",
draft-ietf-httpapi-idempotency-key-header, answers a reused key with another payload).
A process killed between the ledger's commit and this row's commit (the client
got no answer) runs the command again on a retry: for a write the ledger's own rules
make it a no-op answering the first attempt's memory when it names a turn or tool call id
(``ledger.admission``), else a reinforcement of the same statement, not a second memory.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import TypeVar

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from contracts import utc_now
from workers.gateway.errors import InvalidRequestError

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

M = TypeVar("M", bound=BaseModel)


def fingerprint(method: str, path: str, body: object) -> str:
    """SHA-256 (hex) of the method, the path and the body as canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method.upper()}\n{path}\n{canonical}".encode()).hexdigest()


class IdempotencyStore:
    """The ``idempotency_keys`` table (``workers.gateway.schema``)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def once(self, principal: str, key: str, print_: str, run: Callable[[], M], model: type[M]) -> M:
        """``run()``'s result, or the result stored for ``key`` by an earlier request of
        ``principal`` with the same fingerprint ``print_``.

        Raises:
            InvalidRequestError: ``key`` is not 1 to 255 visible ASCII characters, or
                was used for a request with another fingerprint.
            Whatever ``run`` raises (nothing is stored then).
        """
        if _KEY.match(key) is None:
            raise InvalidRequestError(HEADER, "must be 1 to 255 visible ASCII characters")
        with self._pool.connection() as conn, conn.transaction():
            inserted = conn.execute(
                "INSERT INTO idempotency_keys (principal, idem_key, fingerprint, response, created_at)"
                " VALUES (%s, %s, %s, 'null', %s) ON CONFLICT DO NOTHING RETURNING 1",
                (principal, key, print_, utc_now()),
            ).fetchone()
            if inserted is None:
                row = conn.execute(
                    "SELECT fingerprint, response FROM idempotency_keys WHERE principal = %s AND idem_key = %s",
                    (principal, key),
                ).fetchone()
                assert row is not None
                if row[0] != print_:
                    raise InvalidRequestError(HEADER, "was already used for a different request (method, path or body)")
                return model.model_validate(row[1])
            result = run()
            conn.execute(
                "UPDATE idempotency_keys SET response = %s WHERE principal = %s AND idem_key = %s",
                (Jsonb(result.model_dump(mode="json")), principal, key),
            )
            return result
