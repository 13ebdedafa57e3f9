"""MCP over streamable HTTP at ``/mcp`` of ``memledger serve``.

Every HTTP request to ``/mcp`` is authenticated with the same key check as the ``/v1``
routes (``Authorization: Bearer mlk_...``; without a valid key: 401 and the problem
document, with ``WWW-Authenticate``, and the refusal in the audit log), and its tools act
as that key's principal: the caller rides in the request's ASGI scope to the tool, so a
revoked key stops working at the next request. The transport is stateless with JSON
responses (no session held in the process, no long-lived stream), so any ``serve``
process behind a balancer answers any request and a stop never waits on an idle client.
DNS rebinding protection is off: nothing is granted without a bearer token, which a
browser tricked into calling loopback does not have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from workers.api.problems import from_error
from workers.gateway import Caller, Gateway, GatewayError
from workers.mcp.backend import Backend, GatewayBackend
from workers.mcp.server import build_server

PATH = "/mcp"
_CALLER = "memledger.caller"


class McpEndpoint:
    """The ASGI application at ``/mcp``: authenticate, then hand the request to the MCP
    session manager."""

    def __init__(self, gateway: Gateway, manager: StreamableHTTPSessionManager) -> None:
        self._gateway = gateway
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _bearer(scope)
        via = f"{scope.get('method', 'POST')} {PATH}"
        try:
            caller = await anyio.to_thread.run_sync(self._gateway.authenticate, token, via)
        except GatewayError as exc:
            await from_error(exc, PATH)(scope, receive, send)
            return
        scope.setdefault("state", {})[_CALLER] = caller
        await self._manager.handle_request(scope, receive, send)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer":
                return None
            return token.strip() or None
    return None


def caller_of(ctx: Context[Any, Any]) -> Caller:
    """The caller that ``McpEndpoint`` authenticated for this tool call's HTTP request."""
    request = ctx.request_context.request
    if not isinstance(request, Request) or _CALLER not in request.scope.get("state", {}):
        raise RuntimeError("an MCP tool called outside an authenticated /mcp request")
    caller: Caller = request.scope["state"][_CALLER]
    return caller


def mount(app: FastAPI, gateway: Gateway) -> None:
    """Serve MCP at ``/mcp`` of ``app`` over ``gateway``: the route, and the session
    manager run in the application's lifespan (uvicorn must run it: ``lifespan="on"``)."""

    def backend_of(ctx: Context[Any, Any], tool: str) -> Backend:
        return GatewayBackend(gateway, caller_of(ctx).through(f"mcp {tool}"))

    server = build_server(backend_of)
    server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    app.router.routes.append(Route(PATH, endpoint=McpEndpoint(gateway, manager)))
    app.router.lifespan_context = _with(manager.run, app.router.lifespan_context)


def _with(
    run: Callable[[], AbstractAsyncContextManager[None]],
    inner: Callable[[Any], AbstractAsyncContextManager[Any]],
) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with run(), inner(app) as state:
            yield state

    return lifespan
