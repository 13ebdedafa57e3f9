"""The Python client's handling of the API key's token, sync and async, without a server
(httpx's mock transport): checked and stripped when the client is built, refused naming
the field and the rule, never its value; and never in the text of an error the client
raises, whatever httpx or a proxy's error page quoted of the request."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from workers.client import (
    ApiError,
    AsyncLedgerClient,
    InvalidArgument,
    LedgerClient,
    LedgerClientError,
    RetryPolicy,
    TransportError,
)
from workers.langgraph_store import LedgerStore

TOKEN = "mlk_3f2a9c_s3cr3t'\"\\x"  # a quote, a double quote and a backslash: escaped when repr writes it
Handler = Callable[[httpx.Request], httpx.Response]
NO_WAIT = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0)


def healthz(token: Any, handler: Handler, *, sync: bool) -> Any:
    """``healthz`` of a sync or an async client with ``token``, over ``handler``."""
    if sync:
        with LedgerClient("http://ledger", token, retry=NO_WAIT, transport=httpx.MockTransport(handler)) as client:
            return client.healthz()

    async def run() -> Any:
        transport = httpx.MockTransport(handler)
        async with AsyncLedgerClient("http://ledger", token, retry=NO_WAIT, transport=transport) as client:
            return await client.healthz()

    return asyncio.run(run())


def alive(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok", "authorization": request.headers["authorization"]})


def everything_said(exc: BaseException) -> str:
    """What a traceback of ``exc`` prints, its causes and contexts included, and its repr."""
    return "".join(traceback.format_exception(exc)) + repr(exc)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_the_token_is_sent_without_the_white_space_around_it(sync: bool) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return alive(request)

    healthz(f" \t{TOKEN}\n", handler, sync=sync)
    assert seen == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("token", "rule"),
    [
        ("", "must not be empty"),
        (" \n ", "must not be empty"),
        ("mlk_3f2a 9c_secret", "must not hold white space or a control character inside"),
        ("mlk_3f2a\x00secret", "must not hold white space or a control character inside"),
        ("mlk_3f2a\x7fsecret", "must not hold white space or a control character inside"),
        ("mlk_3f2a\u00a0secret", "must not hold white space or a control character inside"),
        ("mlk_3f2a\u200bsecret", "must be ASCII, as an HTTP header carries it"),
        ("mlk_3f2a\u00e9secret", "must be ASCII, as an HTTP header carries it"),
        (None, "must be a string, not NoneType"),
        (b"mlk_3f2a_secret", "must be a string, not bytes"),
    ],
)
def test_a_token_a_header_cannot_carry_is_refused_at_construction_naming_the_field(
    token: Any, rule: str, sync: bool
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return alive(request)

    with pytest.raises(InvalidArgument) as refused:
        healthz(token, handler, sync=sync)
    assert refused.value.field == "token" and refused.value.rule.startswith(rule)
    assert str(refused.value) == f"token: {refused.value.rule}" and sent == []
    assert isinstance(refused.value, LedgerClientError) and isinstance(refused.value, ValueError)
    if isinstance(token, str) and token.strip():
        assert "secret" not in everything_said(refused.value)  # the rule, never the token


def test_the_langgraph_store_refuses_a_bad_token_when_it_is_built() -> None:
    with pytest.raises(InvalidArgument, match=r"^token: must not be empty"):
        LedgerStore("http://127.0.0.1:9", "  ")


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_transport_error_that_quotes_the_request_headers_never_holds_the_token(sync: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused; it sent {request.headers.raw!r}", request=request)

    with pytest.raises(TransportError) as failed:
        healthz(TOKEN, handler, sync=sync)
    said = everything_said(failed.value)
    assert TOKEN not in said and "s3cr3t" not in said
    assert str(failed.value).startswith("GET /healthz: ConnectError: refused; it sent ")
    assert "Bearer <token>" in str(failed.value)
    assert failed.value.__cause__ is None and failed.value.__context__ is None  # no request to reach the header


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_refusal_whose_page_quotes_the_token_never_holds_it(sync: bool) -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text=f"bad gateway: {request.headers['authorization']}")

    def problem(request: httpx.Request) -> httpx.Response:
        token = request.headers["authorization"].removeprefix("Bearer ")
        body = {"title": f"Unauthorized {token}", "status": 401, "detail": f"key {token!r}", "rule": token}
        return httpx.Response(401, json=body)

    for handler in (proxy, problem):
        with pytest.raises(ApiError) as refused:
            healthz(TOKEN, handler, sync=sync)
        said = everything_said(refused.value) + refused.value.problem.model_dump_json()
        assert "s3cr3t" not in said and "<token>" in refused.value.problem.detail


def write(handler: Handler, *, sync: bool) -> Any:
    """A write of a sync or an async client over ``handler`` (two attempts, no wait)."""
    if sync:
        with LedgerClient("http://ledger", TOKEN, retry=NO_WAIT, transport=httpx.MockTransport(handler)) as client:
            return client.write("user-1", "Prefers tea", "support")

    async def run() -> Any:
        transport = httpx.MockTransport(handler)
        async with AsyncLedgerClient("http://ledger", TOKEN, retry=NO_WAIT, transport=transport) as client:
            return await client.write("user-1", "Prefers tea", "support")

    return asyncio.run(run())


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_write_whose_answer_was_lost_says_its_outcome_is_unknown_and_one_never_sent_does_not(sync: bool) -> None:
    attempts: list[str] = []

    def lost_then_refused(request: httpx.Request) -> httpx.Response:
        attempts.append(request.headers.get("idempotency-key", ""))
        if len(attempts) == 1:  # sent, then the server went away before answering
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(TransportError) as lost:
        write(lost_then_refused, sync=sync)
    assert lost.value.outcome_unknown and str(lost.value).startswith(
        "POST /v1/subjects/user-1/memories: ConnectError: connection refused; outcome unknown: an attempt was"
        " sent and its answer lost, so it may have been written"
    )
    assert len(attempts) == 2 and attempts[0] and attempts[0] == attempts[1]  # one idempotency key for both

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(TransportError) as never:
        write(refused, sync=sync)
    assert not never.value.outcome_unknown and "outcome unknown" not in str(never.value)

    def gone(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset", request=request)

    with pytest.raises(TransportError) as read:  # a read lost is no doubt: it changes nothing
        healthz(TOKEN, gone, sync=sync)
    assert not read.value.outcome_unknown

    def recall(client: Any) -> Any:
        return client.recall("user-1", "tea", "support")

    if sync:
        with LedgerClient("http://ledger", TOKEN, retry=NO_WAIT, transport=httpx.MockTransport(gone)) as client:
            with pytest.raises(TransportError) as recalled:  # a POST, but a read
                recall(client)
    else:

        async def run() -> None:
            transport = httpx.MockTransport(gone)
            async with AsyncLedgerClient("http://ledger", TOKEN, retry=NO_WAIT, transport=transport) as client:
                await client.recall("user-1", "tea", "support")

        with pytest.raises(TransportError) as recalled:
            asyncio.run(run())
    assert not recalled.value.outcome_unknown and "outcome unknown" not in str(recalled.value)
