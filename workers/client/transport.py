"""What both clients share about sending a call: the token checked once, headers, when
and how long to wait before a retry, and reading the answer or the failure, neither of
whose texts holds the token."""

from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from workers import wire
from workers.client.calls import Call
from workers.client.errors import ApiError, InvalidArgument, TransportError, error_for

T = TypeVar("T")

RETRIED = (429, 503)
"""Statuses retried (with the same idempotency key)."""


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the wait before try n+1 is the server's
    ``Retry-After`` when it gives one, else ``initial_s * 2**n`` with full jitter
    (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015), at most ``max_s``."""

    attempts: int = 4
    initial_s: float = 0.2
    max_s: float = 10.0

    def delay_s(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(self.max_s, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return random.uniform(0, min(self.max_s, self.initial_s * 2**attempt))


def checked_token(token: object) -> str:
    """``token`` (an API key's token, ``memledger keys create``) without the white space
    around it, as the ``Authorization: Bearer`` header carries it: an HTTP header value
    holds printable ASCII (RFC 9110, 5.5; RFC 6750's ``b64token``), and a character
    outside it would be refused or changed on the way, at the first request.

    Raises:
        InvalidArgument: field ``token``: not a string, empty once stripped, holding white
            space or a control character inside, or a character outside ASCII (the rule
            only, never the token).
    """
    if not isinstance(token, str):
        raise InvalidArgument("token", f"must be a string, not {type(token).__name__}")
    stripped = token.strip()
    if not stripped:
        raise InvalidArgument("token", "must not be empty: give the API key's token (memledger keys create)")
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in stripped):
        raise InvalidArgument("token", "must not hold white space or a control character inside")
    if not stripped.isascii():
        raise InvalidArgument("token", "must be ASCII, as an HTTP header carries it")
    return stripped


def redacted(text: str, token: str) -> str:
    """``text`` with every spelling of ``token`` in it (as it is, escaped as ``repr``
    writes a string or bytes) replaced by ``<token>``."""
    for spelling in {token, repr(token)[1:-1], repr(token.encode("ascii"))[2:-1]}:
        text = text.replace(spelling, "<token>")
    return text


NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
"""httpx's failures before a request left the client: the server cannot have acted on it."""


def may_have_acted(call: Call[Any], exc: httpx.TransportError) -> bool:
    """Whether the server may have acted on an attempt of ``call`` that failed with ``exc``:
    a command (a request that changes something: it carries an idempotency key, which a
    read such as a recall, a ``POST`` too, does not) that was sent, or may have been, and
    whose answer was lost (the connection closed or timed out after it left)."""
    return call.idempotency_key is not None and not isinstance(exc, NEVER_SENT)


def unreachable(call: Call[Any], exc: httpx.HTTPError, token: str, acted: bool = False) -> TransportError:
    """The ``TransportError`` of ``call`` failing with ``exc``: the route and what httpx
    said, without the token (an error of httpx may quote the request's headers), and,
    when an attempt may have been acted on (``acted``, ``may_have_acted``), that its
    outcome is unknown. Raise it outside the ``except`` that caught ``exc``, so that it
    carries no context that holds the request."""
    said = redacted(str(exc), token)
    text = f"{call.method} {call.path}: {type(exc).__name__}{': ' + said if said else ''}"
    if acted:
        text += (
            "; outcome unknown: an attempt was sent and its answer lost, so it may have been written"
            " (read the subject's memories, or the request's trace, before sending it again)"
        )
    return TransportError(text, outcome_unknown=acted)


def headers(token: str, call: Call[Any]) -> dict[str, str]:
    out = {"Authorization": f"Bearer {token}", "Accept": "application/json, application/problem+json"}
    if call.idempotency_key is not None:
        out["Idempotency-Key"] = call.idempotency_key
    return out


def request_kwargs(token: str, call: Call[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"headers": headers(token, call), "params": call.params}
    if call.body is not None or call.method == "POST":
        kwargs["json"] = call.body if call.body is not None else {}
    return kwargs


def retryable(response: httpx.Response) -> bool:
    return response.status_code in RETRIED


def decode(call: Call[T], response: httpx.Response, token: str) -> T:
    """The answer of ``call``.

    Raises:
        ApiError: a refusal (its subclass by status), with the problem document, without
            ``token`` in it (a proxy's error page may quote the request's headers).
    """
    if response.status_code not in call.accept:
        raise refusal(response, token)
    if call.adapter is None:
        return response.text  # type: ignore[return-value]
    return call.adapter.validate_json(response.content)


def refusal(response: httpx.Response, token: str) -> ApiError:
    """The error of a refusal: the problem document of its body (or one made of its
    text), every text in it without ``token``."""
    try:
        problem = wire.Problem.model_validate(response.json())
    except ValueError:
        problem = wire.Problem(title=response.reason_phrase, status=response.status_code, detail=response.text[:500])
    texts = {name: getattr(problem, name) for name in ("type", "title", "detail", "instance", "field", "rule")}
    clean = {name: redacted(text, token) for name, text in texts.items() if isinstance(text, str)}
    return error_for(response.status_code, problem.model_copy(update=clean))
