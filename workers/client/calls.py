"""What each route's request is: method, path, query, body, whether it changes memories
(then it carries an ``Idempotency-Key``, the same on every retry) and the model of its
answer. Both clients send these; nothing here does I/O."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from workers import wire

T = TypeVar("T")

Positions = wire.CommandAck | wire.BatchAck | Sequence[wire.LogPosition] | None
"""What a read may wait for: a command's acknowledgement (its positions), or positions."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (``adapter``; ``None``: the body as text)."""

    method: str
    path: str
    adapter: TypeAdapter[T] | None
    params: list[tuple[str, str]] = field(default_factory=list)
    body: dict[str, Any] | None = None
    idempotency_key: str | None = None
    accept: tuple[int, ...] = (200,)


def _p(segment: str) -> str:
    return quote(segment, safe="")


def positions_of(after: Positions) -> list[wire.LogPosition]:
    """The positions ``after`` names."""
    if after is None:
        return []
    if isinstance(after, wire.CommandAck):
        return list(after.positions)
    if isinstance(after, wire.BatchAck):
        return [p for r in after.results for p in r.positions]
    return list(after)


def _command(path: str, body: BaseModel | dict[str, Any] | None, model: type[T]) -> Call[T]:
    data = body.model_dump(mode="json", exclude_unset=True) if isinstance(body, BaseModel) else body
    return Call(
        "POST", path, TypeAdapter(model), body=data if data is not None else None, idempotency_key=str(uuid.uuid4())
    )


def write(subject_id: str, memory: wire.WriteMemory) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/memories", memory, wire.CommandAck)


def write_batch(subject_id: str, memories: Sequence[wire.WriteMemory]) -> Call[wire.BatchAck]:
    body = {"memories": [m.model_dump(mode="json", exclude_unset=True) for m in memories]}
    return _command(f"/v1/subjects/{_p(subject_id)}/memories/batch", body, wire.BatchAck)


def supersede(subject_id: str, memory_id: str, change: wire.Supersede) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/memories/{_p(memory_id)}/supersede", change, wire.CommandAck)


def confirm(subject_id: str, memory_id: str) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/memories/{_p(memory_id)}/confirm", None, wire.CommandAck)


def redact(subject_id: str, memory_id: str, change: wire.Redact) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/memories/{_p(memory_id)}/redact", change, wire.CommandAck)


def revoke_consent(subject_id: str, change: wire.RevokeConsent) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/consent/revoke", change, wire.CommandAck)


def erase(subject_id: str, change: wire.Erase) -> Call[wire.CommandAck]:
    return _command(f"/v1/subjects/{_p(subject_id)}/erasures", change, wire.CommandAck)


def erasure(
    memory_ids: Sequence[str], whole_subject: bool, source: str | None, reason: str, with_history: bool
) -> wire.Erase:
    """The erasure request of the client's ``erase`` (its sync and async halves)."""
    return wire.Erase(
        memory_ids=list(memory_ids),
        whole_subject=whole_subject,
        source=source,
        reason=reason,
        with_history=with_history,
    )


def memory_tool(subject_id: str, command: wire.MemoryCommand) -> Call[wire.MemoryToolResult]:
    path = f"/v1/subjects/{_p(subject_id)}/memory-tool"
    if isinstance(command, wire.MemoryView):  # a read: nothing to make idempotent
        body = command.model_dump(mode="json", exclude_unset=True)
        return Call("POST", path, TypeAdapter(wire.MemoryToolResult), body=body)
    return _command(path, command, wire.MemoryToolResult)


def recall(
    subject_id: str,
    query: str,
    purpose: str,
    k: int,
    now: datetime | None,
    scope: Sequence[str],
    include_unconfirmed: bool,
    after: Positions,
    wait_timeout_s: float,
    as_of: datetime | None = None,
    max_tokens: int | None = None,
) -> Call[wire.RecallResult]:
    req = wire.Recall(
        query=query,
        purpose=purpose,
        k=k,
        now=now,
        scope=list(scope),
        include_unconfirmed=include_unconfirmed,
        as_of=as_of,
        max_tokens=max_tokens,
        wait_for=positions_of(after),
        wait_timeout_s=wait_timeout_s,
    )
    body = req.model_dump(mode="json", exclude_unset=True)
    return Call("POST", f"/v1/subjects/{_p(subject_id)}/recall", TypeAdapter(wire.RecallResult), body=body)


def _waits(after: Positions, timeout_s: float) -> list[tuple[str, str]]:
    found = positions_of(after)
    if not found:
        return []
    return [*(("wait_for", f"{p.partition}:{p.offset}") for p in found), ("wait_timeout_s", str(timeout_s))]


def memories(
    subject_id: str,
    include_all: bool,
    limit: int,
    after_id: str | None,
    after: Positions,
    timeout_s: float,
    purpose: str | None = None,
    key: str | None = None,
    key_prefix: str | None = None,
    unexpired: bool = False,
) -> Call[wire.MemoryPage]:
    params = [("all", str(include_all).lower()), ("limit", str(limit))]
    params += [("after", after_id)] if after_id else []
    params += [("purpose", purpose)] if purpose is not None else []
    params += [("key", key)] if key is not None else []
    params += [("key_prefix", key_prefix)] if key_prefix is not None else []
    params += [("unexpired", "true")] if unexpired else []
    params += _waits(after, timeout_s)
    return Call("GET", f"/v1/subjects/{_p(subject_id)}/memories", TypeAdapter(wire.MemoryPage), params)


def memory(subject_id: str, memory_id: str, after: Positions, timeout_s: float) -> Call[wire.MemoryDetail]:
    path = f"/v1/subjects/{_p(subject_id)}/memories/{_p(memory_id)}"
    return Call("GET", path, TypeAdapter(wire.MemoryDetail), _waits(after, timeout_s))


def conflicts(subject_id: str, include_resolved: bool) -> Call[list[wire.ConflictOut]]:
    params = [("all", str(include_resolved).lower())]
    return Call("GET", f"/v1/subjects/{_p(subject_id)}/conflicts", TypeAdapter(list[wire.ConflictOut]), params)


def trace(request_id: str) -> Call[wire.TraceOut]:
    return Call("GET", f"/v1/erasures/{_p(request_id)}", TypeAdapter(wire.TraceOut))


def trace_html(request_id: str) -> Call[str]:
    return Call("GET", f"/v1/erasures/{_p(request_id)}/report.html", None)


def erasure_report(since: datetime, until: datetime | None) -> Call[wire.ErasureReportOut]:
    params = [("since", since.isoformat())] + ([("until", until.isoformat())] if until else [])
    return Call("GET", "/v1/erasure-report", TypeAdapter(wire.ErasureReportOut), params)


def lag() -> Call[wire.LagOut]:
    return Call("GET", "/v1/lag", TypeAdapter(wire.LagOut))


def versions() -> Call[list[wire.VersionOut]]:
    return Call("GET", "/v1/versions", TypeAdapter(list[wire.VersionOut]))


def audit(limit: int, before: int | None, subject_id: str | None) -> Call[wire.AuditPage]:
    params = [("limit", str(limit))] + ([("before", str(before))] if before else [])
    params += [("subject_id", subject_id)] if subject_id else []
    return Call("GET", "/v1/audit", TypeAdapter(wire.AuditPage), params)


def wait(after: Positions, timeout_s: float) -> Call[wire.WaitResult]:
    body = wire.Wait(positions=positions_of(after), timeout_s=timeout_s).model_dump(mode="json")
    return Call("POST", "/v1/wait", TypeAdapter(wire.WaitResult), body=body)


def healthz() -> Call[wire.Health]:
    return Call("GET", "/healthz", TypeAdapter(wire.Health))


def readyz() -> Call[wire.Ready]:
    return Call("GET", "/readyz", TypeAdapter(wire.Ready), accept=(200, 503))
