"""What both clients share about sending a call: headers, when and how long to wait
before a retry, and reading the answer."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from workers import wire
from workers.client.calls import Call
from workers.client.errors import error_for

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


def decode(call: Call[T], response: httpx.Response) -> T:
    """The answer of ``call``.

    Raises:
        ApiError: a refusal (its subclass by status), with the problem document.
    """
    if response.status_code not in call.accept:
        try:
            problem = wire.Problem.model_validate(response.json())
        except ValueError:
            problem = wire.Problem(
                title=response.reason_phrase, status=response.status_code, detail=response.text[:500]
            )
        raise error_for(response.status_code, problem)
    if call.adapter is None:
        return response.text  # type: ignore[return-value]
    return call.adapter.validate_json(response.content)
