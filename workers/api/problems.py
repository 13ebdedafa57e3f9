"""Errors as ``application/problem+json`` (RFC 9457): one status code per kind of
gateway error, ``field`` and ``rule`` as the CLI prints them, ``WWW-Authenticate`` on 401
(RFC 6750), ``Retry-After`` in whole seconds on 429 and 503 (RFC 9110, section 10.2.3).
Never a stack trace."""

from __future__ import annotations

import math
from typing import Any

from fastapi.responses import JSONResponse

from workers import wire
from workers.gateway import GatewayError

MEDIA_TYPE = "application/problem+json"

STATUS = {
    "malformed": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "invalid": 422,
    "rate_limited": 429,
    "unavailable": 503,
}

TITLES = {
    400: "Malformed request",
    401: "Not authenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict with the current state",
    413: "Request body too large",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}

ERROR_STATUSES = (400, 401, 403, 404, 409, 413, 422, 429, 503)
"""The error statuses every route documents."""

RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": wire.Problem, "content": {MEDIA_TYPE: {}}, "description": TITLES[code]} for code in ERROR_STATUSES
}
"""OpenAPI ``responses`` of every route: the problem document for each error status."""


def problem(
    status: int,
    field: str | None,
    rule: str | None,
    *,
    instance: str | None = None,
    retry_after_s: float | None = None,
    detail: str | None = None,
) -> JSONResponse:
    """A problem response; ``detail`` defaults to ``field: rule`` (the CLI's wording)."""
    text = detail or (f"{field}: {rule}" if field else rule or TITLES.get(status, "Error"))
    body = wire.Problem(
        type="about:blank",
        title=TITLES.get(status, "Error"),
        status=status,
        detail=text,
        instance=instance,
        field=field,
        rule=rule,
        retry_after_s=None if retry_after_s is None else round(retry_after_s, 3),
    )
    headers: dict[str, str] = {}
    if retry_after_s is not None and status in (429, 503):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="memledger"' + (
            ', error="invalid_token"' if rule and "required" not in rule else ""
        )
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers, media_type=MEDIA_TYPE)


def from_error(exc: GatewayError, instance: str | None = None) -> JSONResponse:
    """The problem response of a gateway error."""
    return problem(STATUS.get(exc.kind, 422), exc.field, exc.rule, instance=instance, retry_after_s=exc.retry_after_s)
