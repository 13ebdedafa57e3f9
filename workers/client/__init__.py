"""The Python client of ``memledger serve``, sync (``LedgerClient``) and async
(``AsyncLedgerClient``), on httpx. Importable without the server's dependencies: it
needs httpx and pydantic only (``workers.wire`` for the bodies)::

    from workers.client import LedgerClient

    with LedgerClient("http://127.0.0.1:8765", token) as ledger:
        ack = ledger.write("alice", "Alice prefers short answers", "technical_writing", key="answer_length")
        items = ledger.recall("alice", "how long should answers be", "technical_writing", after=ack).items

The token is checked when a client is built (``InvalidArgument``, field ``token``), and no
error of the client holds it in its text.
"""

from workers.client.asynchronous import AsyncLedgerClient
from workers.client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    InvalidArgument,
    InvalidRequest,
    LedgerClientError,
    NotFound,
    RateLimited,
    TransportError,
    Unauthenticated,
    Unavailable,
)
from workers.client.sync import LedgerClient
from workers.client.transport import RetryPolicy

__all__ = [
    "ApiError",
    "AsyncLedgerClient",
    "Conflict",
    "Forbidden",
    "InvalidArgument",
    "InvalidRequest",
    "LedgerClient",
    "LedgerClientError",
    "NotFound",
    "RateLimited",
    "RetryPolicy",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
]
