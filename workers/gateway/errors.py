"""The error tree of the application layer. Each error says what the caller can act on:
the field and the rule broken (with the words the CLI uses), or how long to wait. The
transports map them: HTTP to a status code and a problem document, the MCP tools to a
tool error."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error raised by :mod:`workers.gateway`. ``field`` names the input
    (or the header) and ``rule`` what was wrong with it; ``retry_after_s`` is set when
    the same request may succeed later."""

    kind = "invalid"

    def __init__(self, field: str, rule: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule
        self.retry_after_s = retry_after_s


class InvalidRequestError(GatewayError):
    """Bad input: a field breaks a rule of the wire or of the ledger; nothing was written."""

    kind = "invalid"


class MalformedRequestError(GatewayError):
    """The request cannot be read at all (not JSON, a body where none is taken)."""

    kind = "malformed"


class UnauthenticatedError(GatewayError):
    """No credential, or one that is unknown, malformed or revoked (field ``authorization``)."""

    kind = "unauthenticated"


class ForbiddenError(GatewayError):
    """The credential's principal, scopes or subject grants do not allow the action."""

    kind = "forbidden"


class NotFoundError(GatewayError):
    """No such memory or request of this subject (another subject's is not revealed)."""

    kind = "not_found"


class ConflictError(GatewayError):
    """The request conflicts with the current state (a memory already superseded,
    erased or expired; an idempotency key in use for another request)."""

    kind = "conflict"


class RateLimitedError(GatewayError):
    """The key is over its rate for this kind of request; retry after ``retry_after_s``."""

    kind = "rate_limited"


class UnavailableError(GatewayError):
    """A store did not answer, or a projection has not applied the positions waited
    for in time; retry after ``retry_after_s``. Nothing was written."""

    kind = "unavailable"
