"""The HTTP API under ``/v1`` (FastAPI): thin routes over :class:`workers.gateway.Gateway`.

Every ``/v1`` route takes a bearer token (``Authorization: Bearer mlk_...``); the subject
is the URL's and is checked against the key's principal, scopes and grants; bodies never
name a subject or a writer. Commands answer once the log has their events, with their
ids and positions; reads take ``wait_for`` positions to read their own writes. POSTs
that change memories take an ``Idempotency-Key`` header. Errors are problem documents
(``workers.api.problems``). OpenAPI 3.1 at ``/openapi.json``, docs at ``/docs``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from workers import wire
from workers.api.limits import BodyLimit
from workers.api.paths import SegmentPaths
from workers.api.problems import RESPONSES, from_error, problem
from workers.gateway import Caller, Gateway, GatewayError, InvalidRequestError
from workers.memtool.service import MemoryTool, retry_answer, retry_record

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_bearer = HTTPBearer(auto_error=False, description="an API key: memledger keys create")

Subject = Annotated[
    str, Path(min_length=1, max_length=512, description="whose memories (checked against the key's grants)")
]
Ident = Annotated[str, Path(min_length=1, max_length=512)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="a retried request with the same key returns the first result",
    ),
]
WaitFor = Annotated[
    list[str] | None,
    Query(description="PARTITION:OFFSET a projection must have applied first (repeat)", max_length=1000),
]
WaitTimeout = Annotated[float, Query(ge=0, le=60, description="longest wait for wait_for, seconds")]


def parse_positions(values: Sequence[str] | None) -> list[wire.LogPosition]:
    """``PARTITION:OFFSET`` strings as positions.

    Raises:
        InvalidRequestError: field ``wait_for``, for anything else.
    """
    out = []
    for value in values or ():
        partition, sep, offset = value.partition(":")
        if not (sep and partition.isdigit() and offset.isdigit()) or len(value) > 40:
            raise InvalidRequestError("wait_for", f"{value!r} must be PARTITION:OFFSET, e.g. 0:42")
        out.append(wire.LogPosition(partition=int(partition), offset=int(offset)))
    return out


def create_app(gateway: Gateway, routers: Sequence[APIRouter] = (), max_body_bytes: int | None = None) -> FastAPI:
    """The application over ``gateway``; ``routers`` are mounted as well (``memledger
    serve`` adds the local operator's one). Bodies over ``max_body_bytes`` (default: the
    settings' ``api_max_body_bytes``) get 413."""
    app = FastAPI(
        title="memory-ledger",
        summary="An event-sourced memory ledger for AI agents",
        version="1",
        description=__doc__,
        responses=RESPONSES,
    )
    app.state.gateway = gateway
    app.add_middleware(SegmentPaths)  # a subject id may hold '/': routed on the raw path
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes or gateway.svc.settings.api_max_body_bytes)
    _handlers(app)
    app.include_router(_health(gateway))
    app.include_router(_v1(gateway))
    for router in routers:
        app.include_router(router)
    return app


def authenticated(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """A dependency: the authenticated caller of a request (the route template as ``via``),
    by the gateway of the application (``app.state.gateway``)."""
    via = _route_of(request)
    token = credentials.credentials if credentials is not None else None
    gateway: Gateway = request.app.state.gateway
    return gateway.authenticate(token or None, via)


Who = Annotated[Caller, Depends(authenticated)]
"""The authenticated caller of a route."""


def _route_of(request: Request) -> str:
    route = request.scope.get("route")
    return f"{request.method} {getattr(route, 'path_format', request.url.path)}"


def _health(gateway: Gateway) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz", response_model=wire.Health, summary="The process is alive")
    def healthz() -> wire.Health:
        return wire.Health(status="ok")

    @router.get(
        "/readyz",
        response_model=wire.Ready,
        summary="Every store answers",
        responses={503: {"model": wire.Ready, "description": "a store does not answer"}},
    )
    def readyz() -> JSONResponse:
        ready = gateway.ready()
        return JSONResponse(ready.model_dump(mode="json"), status_code=200 if ready.ready else 503)

    return router


def _v1(gateway: Gateway) -> APIRouter:
    router = APIRouter(prefix="/v1", responses=RESPONSES)

    def once(
        caller: Caller,
        request: Request,
        key: str | None,
        body: BaseModel | None,
        model: type[M],
        run: Callable[[], M],
        record: Callable[[M], M] | None = None,
        replay: Callable[[M], M] | None = None,
    ) -> M:
        """``run()`` under the request's idempotency key (fingerprint: method, path, body,
        under the keyring's HMAC key)."""
        dumped = None if body is None else body.model_dump(mode="json")
        print_ = gateway.fingerprint(request.method, request.url.path, dumped)
        return gateway.idempotent(caller, key, print_, run, model, record, replay)

    @router.post("/subjects/{subject_id:segment}/memories", response_model=wire.CommandAck, tags=["memories"])
    def write(
        subject_id: Subject, body: wire.WriteMemory, caller: Who, request: Request, key: IdempotencyKey = None
    ) -> wire.CommandAck:
        """Write one memory of the subject; answered once the log has its events."""
        return once(caller, request, key, body, wire.CommandAck, lambda: gateway.write(caller, subject_id, body))

    @router.post("/subjects/{subject_id:segment}/memories/batch", response_model=wire.BatchAck, tags=["memories"])
    def write_batch(
        subject_id: Subject, body: wire.WriteBatch, caller: Who, request: Request, key: IdempotencyKey = None
    ) -> wire.BatchAck:
        """Write several memories of the subject in one transaction (all or none)."""
        return once(caller, request, key, body, wire.BatchAck, lambda: gateway.write_batch(caller, subject_id, body))

    @router.get("/subjects/{subject_id:segment}/memories", response_model=wire.MemoryPage, tags=["memories"])
    def memories(
        subject_id: Subject,
        caller: Who,
        include_all: Annotated[bool, Query(alias="all", description="every status, erased included")] = False,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        after: Annotated[str | None, Query(max_length=512, description="next_after of the previous page")] = None,
        wait_for: WaitFor = None,
        wait_timeout_s: WaitTimeout = 5.0,
        purpose: Annotated[str | None, Query(min_length=1, max_length=512, description="only this purpose's")] = None,
        key: Annotated[str | None, Query(min_length=1, max_length=512, description="only this key's")] = None,
        key_prefix: Annotated[
            str | None, Query(min_length=1, max_length=512, description="only keys that start with it")
        ] = None,
        unexpired: Annotated[bool, Query(description="leave out what has expired, swept or not")] = False,
    ) -> wire.MemoryPage:
        """The subject's memories with status, key, revision and what superseded what;
        narrowed to a purpose, a key, a key prefix and what has not expired when asked (a
        purpose, a key or a key prefix leaves erased memories out: they keep none)."""
        return gateway.memories(
            caller,
            subject_id,
            include_all=include_all,
            limit=limit,
            after=after,
            wait_for=parse_positions(wait_for),
            wait_timeout_s=wait_timeout_s,
            purpose=purpose,
            key=key,
            key_prefix=key_prefix,
            unexpired=unexpired,
        )

    @router.get(
        "/subjects/{subject_id:segment}/memories/{memory_id:segment}",
        response_model=wire.MemoryDetail,
        tags=["memories"],
    )
    def memory(
        subject_id: Subject,
        memory_id: Ident,
        caller: Who,
        wait_for: WaitFor = None,
        wait_timeout_s: WaitTimeout = 5.0,
    ) -> wire.MemoryDetail:
        """One memory and its content-free history."""
        return gateway.memory(caller, subject_id, memory_id, parse_positions(wait_for), wait_timeout_s)

    @router.post(
        "/subjects/{subject_id:segment}/memories/{memory_id:segment}/supersede",
        response_model=wire.CommandAck,
        tags=["memories"],
    )
    def supersede(
        subject_id: Subject,
        memory_id: Ident,
        body: wire.Supersede,
        caller: Who,
        request: Request,
        key: IdempotencyKey = None,
    ) -> wire.CommandAck:
        """Replace a memory with a new one."""
        return once(
            caller, request, key, body, wire.CommandAck, lambda: gateway.supersede(caller, subject_id, memory_id, body)
        )

    @router.post(
        "/subjects/{subject_id:segment}/memories/{memory_id:segment}/confirm",
        response_model=wire.CommandAck,
        tags=["memories"],
    )
    def confirm(
        subject_id: Subject,
        memory_id: Ident,
        caller: Who,
        request: Request,
        key: IdempotencyKey = None,
    ) -> wire.CommandAck:
        """The subject confirmed the memory (an inference becomes active)."""
        return once(caller, request, key, None, wire.CommandAck, lambda: gateway.confirm(caller, subject_id, memory_id))

    @router.post(
        "/subjects/{subject_id:segment}/memories/{memory_id:segment}/redact",
        response_model=wire.CommandAck,
        tags=["memories"],
    )
    def redact(
        subject_id: Subject,
        memory_id: Ident,
        body: wire.Redact,
        caller: Who,
        request: Request,
        key: IdempotencyKey = None,
    ) -> wire.CommandAck:
        """Replace the memory's text with the redacted text."""
        return once(
            caller, request, key, body, wire.CommandAck, lambda: gateway.redact(caller, subject_id, memory_id, body)
        )

    @router.post("/subjects/{subject_id:segment}/consent/revoke", response_model=wire.CommandAck, tags=["memories"])
    def revoke_consent(
        subject_id: Subject, body: wire.RevokeConsent, caller: Who, request: Request, key: IdempotencyKey = None
    ) -> wire.CommandAck:
        """Withdraw consent by consent reference or purpose (permanent)."""
        return once(
            caller, request, key, body, wire.CommandAck, lambda: gateway.revoke_consent(caller, subject_id, body)
        )

    @router.post("/subjects/{subject_id:segment}/erasures", response_model=wire.CommandAck, tags=["erasure"])
    def erase(
        subject_id: Subject, body: wire.Erase, caller: Who, request: Request, key: IdempotencyKey = None
    ) -> wire.CommandAck:
        """Erase memories by ids, by source, or the whole subject; returns the request id."""
        return once(caller, request, key, body, wire.CommandAck, lambda: gateway.erase(caller, subject_id, body))

    tool = MemoryTool(gateway)

    @router.post(
        "/subjects/{subject_id:segment}/memory-tool", response_model=wire.MemoryToolResult, tags=["memory tool"]
    )
    def memory_tool(
        subject_id: Subject,
        body: Annotated[wire.MemoryCommand, Body()],
        caller: Who,
        request: Request,
        key: IdempotencyKey = None,
    ) -> wire.MemoryToolResult:
        """One command of the Anthropic API's memory tool (memory_20250818: view, create,
        str_replace, insert, delete, rename) on the subject's files under /memories, as
        the model sent it. A file is a memory of the subject; delete is an erasure (the
        erase scope) with a request id to trace; content_sha256 refuses a stale edit (409)."""
        if isinstance(body, wire.MemoryView):  # a read: run again on a retry; no record keeps its text
            return tool.execute(caller, subject_id, body)
        return once(
            caller,
            request,
            key,
            body,
            wire.MemoryToolResult,
            lambda: tool.execute(caller, subject_id, body),
            record=retry_record,
            replay=lambda stored: retry_answer(body, stored),
        )

    @router.post("/subjects/{subject_id:segment}/recall", response_model=wire.RecallResult, tags=["recall"])
    def recall(subject_id: Subject, body: wire.Recall, caller: Who) -> wire.RecallResult:
        """Recall the subject's memories for a query, purpose and task scope."""
        return gateway.recall(caller, subject_id, body)

    @router.get("/subjects/{subject_id:segment}/conflicts", response_model=list[wire.ConflictOut], tags=["memories"])
    def conflicts(
        subject_id: Subject,
        caller: Who,
        include_resolved: Annotated[bool, Query(alias="all", description="resolved ones too")] = False,
    ) -> list[wire.ConflictOut]:
        """Memories that claim different values for one key."""
        return gateway.conflicts(caller, subject_id, include_resolved)

    @router.get("/erasures/{request_id:segment}", response_model=wire.TraceOut, tags=["erasure"])
    def trace(request_id: Ident, caller: Who) -> wire.TraceOut:
        """Where an erasure was applied, store by store, with live probes and the verdict."""
        return gateway.trace(caller, request_id)

    @router.get(
        "/erasures/{request_id:segment}/report.html",
        response_class=HTMLResponse,
        tags=["erasure"],
        responses={200: {"content": {"text/html": {}}, "description": "the HTML report"}},
    )
    def trace_html(request_id: Ident, caller: Who) -> HTMLResponse:
        """The trace as a self-contained HTML report."""
        return HTMLResponse(gateway.trace_html(caller, request_id))

    @router.get("/erasure-report", response_model=wire.ErasureReportOut, tags=["erasure"])
    def erasure_report(
        caller: Who,
        since: Annotated[wire.Time, Query(description="ISO 8601 time with zone")],
        until: Annotated[wire.Time | None, Query(description="ISO 8601 time with zone (default: now)")] = None,
    ) -> wire.ErasureReportOut:
        """Every erasure request in [since, until) with its verdict."""
        return gateway.erasure_report(caller, since, until)

    @router.get("/lag", response_model=wire.LagOut, tags=["operations"])
    def lag(caller: Who) -> wire.LagOut:
        """Records each projection version has not applied (admin scope)."""
        return gateway.lag(caller)

    @router.get("/versions", response_model=list[wire.VersionOut], tags=["operations"])
    def versions(caller: Who) -> list[wire.VersionOut]:
        """Every projection version (admin scope)."""
        return gateway.versions(caller)

    @router.get("/audit", response_model=wire.AuditPage, tags=["operations"])
    def audit(
        caller: Who,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=1, le=2**62, description="next_before of the previous page")] = None,
        subject_id: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    ) -> wire.AuditPage:
        """The audit log, newest first (admin scope)."""
        return gateway.audit(caller, limit, before, subject_id)

    @router.post("/wait", response_model=wire.WaitResult, tags=["operations"])
    def wait(body: wire.Wait, caller: Who) -> wire.WaitResult:
        """Wait until the projections have applied the given log positions."""
        return gateway.wait(caller, body)

    return router


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return from_error(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") in ("json_invalid", "model_attributes_type") or (
            first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",)
        ):
            status, field, rule = 400, "body", _message(first)
        else:
            status, field, rule = 422, _field(first.get("loc", ())), _message(first)
        return problem(status, field, rule, instance=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        rule = {404: "no such route", 405: f"{request.method} is not allowed here"}.get(
            exc.status_code, str(exc.detail)
        )
        return problem(exc.status_code, None, rule, instance=request.url.path)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem(500, None, "the server failed; the error is in its log", instance=request.url.path)


def _field(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _message(error: Any) -> str:
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")
