"""The application layer of ``memledger serve``: every operation an authenticated
principal can perform, transport-independent. The HTTP routes (``workers.api``) and the
agent tools are thin over :class:`Gateway`; ``keys`` holds the API keys, ``audit`` the
audit log, ``commands`` the ledger commands a request makes (the CLI builds its own
with it too)."""

from workers.gateway.audit import AuditLog, AuditRecord
from workers.gateway.errors import (
    ConflictError,
    ForbiddenError,
    GatewayError,
    InvalidRequestError,
    MalformedRequestError,
    NotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    UnavailableError,
)
from workers.gateway.idempotency import HEADER as IDEMPOTENCY_HEADER
from workers.gateway.idempotency import fingerprint
from workers.gateway.keys import SCOPES, ApiKey, KeyStore
from workers.gateway.service import Caller, Gateway, translate

__all__ = [
    "IDEMPOTENCY_HEADER",
    "SCOPES",
    "ApiKey",
    "AuditLog",
    "AuditRecord",
    "Caller",
    "ConflictError",
    "ForbiddenError",
    "Gateway",
    "GatewayError",
    "InvalidRequestError",
    "KeyStore",
    "MalformedRequestError",
    "NotFoundError",
    "RateLimitedError",
    "UnauthenticatedError",
    "UnavailableError",
    "fingerprint",
    "translate",
]
