"""The client's error tree: one class per kind of refusal, each carrying the server's
problem document (``field`` and ``rule`` as the CLI prints them); ``InvalidArgument`` for
what the client refuses itself, before anything is sent. No error's text holds the API
key's token."""

from __future__ import annotations

from workers.wire import Problem


class LedgerClientError(Exception):
    """Base of every error raised by :mod:`workers.client`."""


class InvalidArgument(LedgerClientError, ValueError):
    """An argument the client refuses before sending anything (the API key's token):
    ``field`` names it, ``rule`` what was wrong with it (never its value)."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class TransportError(LedgerClientError):
    """The server could not be reached (connection refused, timeout) after the retries.
    ``outcome_unknown``: an attempt of a request that changes something was sent and its
    answer lost (the message says so): it may have been written."""

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class ApiError(LedgerClientError):
    """The server refused the request: ``status`` and its ``problem`` document."""

    def __init__(self, status: int, problem: Problem) -> None:
        super().__init__(f"{status}: {problem.detail}")
        self.status = status
        self.problem = problem

    @property
    def field(self) -> str | None:
        return self.problem.field

    @property
    def rule(self) -> str | None:
        return self.problem.rule


class InvalidRequest(ApiError):
    """400, 413 or 422: bad input; nothing was written."""


class Unauthenticated(ApiError):
    """401: no credential, or an unknown or revoked key."""


class Forbidden(ApiError):
    """403: the key's scopes or subject grants do not allow it."""


class NotFound(ApiError):
    """404: no such memory or request of this subject."""


class Conflict(ApiError):
    """409: the request conflicts with the memory's current state."""


class RateLimited(ApiError):
    """429: over the key's rate, still after the retries."""


class Unavailable(ApiError):
    """503: a store down, or a wait for positions timed out, still after the retries."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}


def error_for(status: int, problem: Problem) -> ApiError:
    """The error of a refusal with ``status``."""
    return _BY_STATUS.get(status, ApiError)(status, problem)
