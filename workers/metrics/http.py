"""``memledger serve``'s side of the metrics: an ASGI middleware that counts and times
every HTTP request by method, route template and status (and refusals by reason), and
the ``GET /metrics`` route.

``/metrics`` takes a bearer key with the ``admin`` scope, as ``/v1/lag``,
``/v1/versions`` and ``/v1/audit`` do: serve's port is the API that agents reach, bound
to a non-loopback address in any deployment that has more than one host, and the
figures (request and refusal rates per route, lag, erasure counts) are operational
information of the same kind as those routes show. A refused scrape is answered 401 or
403 and audited like any refusal. A Prometheus job sends the key with
``authorization: {credentials_file: ...}``.

Labels are bounded: the route is the template the request matched (never its path,
which holds subject and memory ids), ``unmatched`` when it matched none; the method is
one of ``METHODS`` or ``other``.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api.app import Who
from workers.gateway import Gateway
from workers.metrics import families

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as they are in the ``method`` label; any other is ``other``."""

ROUTE = "/metrics"


class HttpMetrics:
    """ASGI middleware: ``memledger_http_requests_total``,
    ``memledger_http_request_duration_seconds`` (arrival to the end of the response) and
    ``memledger_http_refusals_total`` (status 400 and above) for every HTTP request of
    ``app``. ``routes`` is the application whose route templates label the requests that
    were answered before routing (a 413 of the body limit)."""

    def __init__(self, app: ASGIApp, routes: FastAPI) -> None:
        self.app = app
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def tracked(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = self._template(scope)
            families.HTTP_SECONDS.labels(method, route).observe(time.perf_counter() - started)
            families.HTTP_REQUESTS.labels(method, route, str(status)).inc()
            if status >= 400:
                families.HTTP_REFUSALS.labels(method, route, families.refusal_reason(status)).inc()

    def _template(self, scope: Scope) -> str:
        """The template of the route ``scope`` matched (set by the router), else of the
        first route matching its path, else ``unmatched``."""
        route: Any = scope.get("route")
        if route is None:
            for candidate in self._routes.router.routes:
                if candidate.matches(scope)[0] != Match.NONE:
                    route = candidate
                    break
        path = getattr(route, "path_format", None)  # the template without convertors
        return str(path) if path else "unmatched"


def metrics_router(gateway: Gateway) -> APIRouter:
    """``GET /metrics``: this process's metrics in the Prometheus text format (or
    OpenMetrics when the scraper asks for it), for a key with the admin scope (not in
    the OpenAPI document: it is not part of the agents' API)."""
    router = APIRouter()

    @router.get(ROUTE, include_in_schema=False)
    def metrics(request: Request, caller: Who) -> Response:
        gateway.authorise_metrics(caller)
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(REGISTRY), media_type=content_type)

    return router


def instrument(app: FastAPI) -> FastAPI:
    """``app`` with ``HttpMetrics`` around everything (the body limit included)."""
    app.add_middleware(HttpMetrics, routes=app)
    return app
