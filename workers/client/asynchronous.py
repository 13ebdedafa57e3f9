"""The asynchronous client of the HTTP API, on httpx: a typed method per route (generated
from ``workers.client.calls``, the same for the sync and the async client). Requests
that change memories carry an ``Idempotency-Key``, the same on every retry; 429 and 503
answers and connection errors are retried with backoff (``RetryPolicy``), after the
server's ``Retry-After`` when it gives one. Refusals raise ``workers.client.errors``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from workers import wire
from workers.client import calls
from workers.client.calls import Call, Positions
from workers.client.transport import (
    RetryPolicy,
    checked_token,
    decode,
    may_have_acted,
    request_kwargs,
    retryable,
    unreachable,
)

T = TypeVar("T")


class AsyncLedgerClient:
    """The asynchronous ``LedgerClient`` (``async with AsyncLedgerClient(url, token) as c``).

    Raises (at construction):
        InvalidArgument: field ``token``, as ``LedgerClient``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._token = checked_token(token)
        self._retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout_s, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        """Send ``call``, retrying 429, 503 and connection errors (see ``LedgerClient._send``)."""
        acted = False  # an attempt may have been acted on, its answer lost
        for attempt in range(self._retry.attempts - 1):
            try:
                response = await self._http.request(call.method, call.path, **request_kwargs(self._token, call))
            except httpx.TransportError as exc:
                acted = acted or may_have_acted(call, exc)
                await asyncio.sleep(self._retry.delay_s(attempt, None))
                continue
            if retryable(response) and response.status_code not in call.accept:
                await asyncio.sleep(self._retry.delay_s(attempt, response.headers.get("Retry-After")))
                continue
            return decode(call, response, self._token)
        try:  # the last attempt: its failure is the answer
            response = await self._http.request(call.method, call.path, **request_kwargs(self._token, call))
        except httpx.TransportError as exc:
            failure = unreachable(call, exc, self._token, acted or may_have_acted(call, exc))
        else:
            return decode(call, response, self._token)
        raise failure  # outside the except: no context holding the request and its headers

    async def send(self, call: Call[T]) -> T:
        """Send a prepared ``call`` (``workers.client.calls``), with the same retries and
        errors as every method; for a caller that builds its requests itself."""
        return await self._send(call)

    async def write(self, subject_id: str, content: str, purpose: str, **fields: Any) -> wire.CommandAck:
        """Write one memory of ``subject_id``; ``fields`` are those of ``wire.WriteMemory``
        (kind, key, scope, agent, ...). Answered once the log has its events."""
        return await self._send(calls.write(subject_id, wire.WriteMemory(content=content, purpose=purpose, **fields)))

    async def write_batch(self, subject_id: str, memories: Sequence[wire.WriteMemory]) -> wire.BatchAck:
        """Write several memories of ``subject_id`` in one transaction (all or none)."""
        return await self._send(calls.write_batch(subject_id, memories))

    async def supersede(self, subject_id: str, memory_id: str, content: str, **fields: Any) -> wire.CommandAck:
        """Replace ``memory_id`` with a new memory; ``fields`` are those of ``wire.Supersede``."""
        return await self._send(calls.supersede(subject_id, memory_id, wire.Supersede(content=content, **fields)))

    async def confirm(self, subject_id: str, memory_id: str) -> wire.CommandAck:
        """The subject confirmed ``memory_id`` (an inference becomes active)."""
        return await self._send(calls.confirm(subject_id, memory_id))

    async def redact(self, subject_id: str, memory_id: str, replacement: str) -> wire.CommandAck:
        """Replace the text of ``memory_id`` with ``replacement``."""
        return await self._send(calls.redact(subject_id, memory_id, wire.Redact(replacement=replacement)))

    async def revoke_consent(
        self, subject_id: str, consent_ref: str | None = None, purpose: str | None = None, allow_unmatched: bool = False
    ) -> wire.CommandAck:
        """Withdraw consent by reference or purpose (permanent)."""
        return await self._send(
            calls.revoke_consent(
                subject_id,
                wire.RevokeConsent(consent_ref=consent_ref, purpose=purpose, allow_unmatched=allow_unmatched),
            )
        )

    async def erase(
        self,
        subject_id: str,
        memory_ids: Sequence[str] = (),
        *,
        whole_subject: bool = False,
        source: str | None = None,
        reason: str = "erasure requested by the subject",
        with_history: bool = False,
    ) -> wire.CommandAck:
        """Erase memories by id, by ``source``, or the ``whole_subject`` (``with_history``: and every
        earlier version they superseded); the answer's ``request_id`` traces it."""
        return await self._send(
            calls.erase(subject_id, calls.erasure(memory_ids, whole_subject, source, reason, with_history))
        )

    async def memory_tool(
        self, subject_id: str, command: wire.MemoryCommand | Mapping[str, Any]
    ) -> wire.MemoryToolResult:
        """One memory tool command on ``subject_id``'s files: a ``wire.MemoryCommand``,
        or the tool input the model sent (``{"command": "view", "path": "/memories"}``),
        checked here first (pydantic.ValidationError naming the field)."""
        parsed = command if isinstance(command, BaseModel) else wire.MEMORY_COMMAND.validate_python(command)
        return await self._send(calls.memory_tool(subject_id, parsed))

    async def recall(
        self,
        subject_id: str,
        query: str,
        purpose: str,
        *,
        k: int = 10,
        now: datetime | None = None,
        scope: Sequence[str] = (),
        include_unconfirmed: bool = False,
        as_of: datetime | None = None,
        max_tokens: int | None = None,
        after: Positions = None,
        wait_timeout_s: float = 5.0,
    ) -> wire.RecallResult:
        """Recall for a task; ``as_of`` (aware UTC): what was known then; ``max_tokens``: the
        best items that fit that budget. ``after`` (a command's acknowledgement or positions)
        makes recall wait, at most ``wait_timeout_s`` seconds, until the projections it reads
        have applied them (read your own writes)."""
        return await self._send(
            calls.recall(
                subject_id, query, purpose, k, now, scope, include_unconfirmed, after, wait_timeout_s, as_of, max_tokens
            )
        )

    async def memories(
        self,
        subject_id: str,
        *,
        include_all: bool = False,
        limit: int = 100,
        after_id: str | None = None,
        after: Positions = None,
        wait_timeout_s: float = 5.0,
        purpose: str | None = None,
        key: str | None = None,
        key_prefix: str | None = None,
        unexpired: bool = False,
    ) -> wire.MemoryPage:
        """A page of the subject's memories with status, key, revision and supersessions;
        ``after_id`` is the previous page's ``next_after``. ``purpose``: only that
        purpose's; ``key``: only that key's; ``key_prefix``: only keys that start with it;
        ``unexpired``: leave out what has expired at the server's now, swept or not."""
        return await self._send(
            calls.memories(
                subject_id, include_all, limit, after_id, after, wait_timeout_s, purpose, key, key_prefix, unexpired
            )
        )

    async def memory(
        self, subject_id: str, memory_id: str, *, after: Positions = None, wait_timeout_s: float = 5.0
    ) -> wire.MemoryDetail:
        """One memory and its content-free history."""
        return await self._send(calls.memory(subject_id, memory_id, after, wait_timeout_s))

    async def conflicts(self, subject_id: str, include_resolved: bool = False) -> list[wire.ConflictOut]:
        """The subject's conflicts."""
        return await self._send(calls.conflicts(subject_id, include_resolved))

    async def trace(self, request_id: str) -> wire.TraceOut:
        """Where an erasure was applied, store by store, and the verdict."""
        return await self._send(calls.trace(request_id))

    async def trace_html(self, request_id: str) -> str:
        """The trace as a self-contained HTML report."""
        return await self._send(calls.trace_html(request_id))

    async def erasure_report(self, since: datetime, until: datetime | None = None) -> wire.ErasureReportOut:
        """Erasure requests in [since, until) with their verdicts."""
        return await self._send(calls.erasure_report(since, until))

    async def lag(self) -> wire.LagOut:
        """Records each projection version has not applied (admin scope)."""
        return await self._send(calls.lag())

    async def versions(self) -> list[wire.VersionOut]:
        """Every projection version (admin scope)."""
        return await self._send(calls.versions())

    async def audit(self, limit: int = 100, before: int | None = None, subject_id: str | None = None) -> wire.AuditPage:
        """The audit log, newest first (admin scope)."""
        return await self._send(calls.audit(limit, before, subject_id))

    async def wait(self, after: Positions, timeout_s: float = 5.0) -> wire.WaitResult:
        """Wait until the projections recall reads have applied ``after``."""
        return await self._send(calls.wait(after, timeout_s))

    async def healthz(self) -> wire.Health:
        """The server is alive."""
        return await self._send(calls.healthz())

    async def readyz(self) -> wire.Ready:
        """Whether every store answers."""
        return await self._send(calls.readyz())
