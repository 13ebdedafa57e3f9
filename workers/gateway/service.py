"""The ``Gateway``: every operation an authenticated principal can perform, whatever
the transport (the HTTP routes of ``workers.api``, agent tools, the CLI through
``memledger serve``).

Each operation authorises the subject against the caller's principal, scopes and
subject grants (deny by default), applies the key's rate limit, calls the ledger or a
read of the projections through their public functions, writes the audit record (every
refusal; every erasure, trace and export), and returns a typed result of
``workers.wire``. Errors are :mod:`workers.gateway.errors`, with the field and the rule
in the words the CLI uses; nothing is half written (each ledger command is one
transaction).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError

from contracts import utc_now
from ledger.errors import (
    AcknowledgementLostError,
    EventLogError,
    InvalidCommandError,
    LedgerError,
    NotAuthorisedError,
    NotWrittenError,
    OutcomeUnknownError,
    UnknownMemoryError,
)
from ledger.principals import Grant, Principal
from ledger.service import CommandResult, LiveMemory
from projections import base
from projections.conflicts import list_conflicts
from projections.erasure_report import erasure_report
from projections.errors import ProjectionStalledError, RecallError, UnknownRequestError
from projections.facts import STABLE
from projections.memories import get_memory, list_memories, memory_history
from projections.trace import TraceReport, trace
from projections.trace_html import render_html
from projections.vector_index import VectorIndexError
from projections.wording import counted
from workers import wire
from workers.bootstrap import Services
from workers.gateway import commands, fields, positions, schema
from workers.gateway.audit import AuditLog
from workers.gateway.errors import (
    ConflictError,
    ForbiddenError,
    GatewayError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    UnavailableError,
)
from workers.gateway.idempotency import IdempotencyStore, fingerprint
from workers.gateway.keys import ApiKey, KeyStore
from workers.gateway.ratelimit import Rate, TokenBuckets

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

STORE_DOWN_RETRY_S = 1.0
"""``Retry-After`` of a refusal because a store did not answer."""

LOCK_CONNECTIONS = 4
"""Connections of ``Gateway.serialised``'s own pool: at most this many locks held at once per process."""

AUDITED = ("unauthenticated", "forbidden", "not_found", "rate_limited")
"""Refusals that go into the audit log (bad input is answered, not audited)."""

_STATE_RULE = re.compile(
    r"\b(is|are) (erased|superseded|expired|revoked|active)\b|already|left to erase|expired at|not awaiting"
)
"""Rules of ``InvalidCommandError`` that concern a memory's current state (409), not the input (422)."""

_STORE_ERRORS = (psycopg.OperationalError, PoolTimeout, RedisError, VectorIndexError, ProjectionStalledError)


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its key, the principal with the key's grants (scopes x
    subjects; for the local operator, the grants file's), and ``via``, the route or
    tool it came through (for the audit log)."""

    key: ApiKey
    principal: Principal
    via: str = ""

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.key.scopes)

    def through(self, via: str) -> Caller:
        """This caller on route or tool ``via``."""
        return replace(self, via=via)


class Gateway:
    """The application layer over ``svc`` (built once per process). Its own pool
    (``pool_max_size`` connections) serves keys, audit and idempotency records, so an
    idempotent request holding its row never waits for the ledger's connections.
    ``operators``: the principals the local operator's key may act as (default: the grants
    file's as it is at each request, ``svc.principals``)."""

    def __init__(self, svc: Services, operators: dict[str, Principal] | None = None) -> None:
        self.svc = svc
        settings = svc.settings
        self.pool = ConnectionPool(
            svc.pool.conninfo, min_size=1, max_size=settings.pool_max_size, open=True, timeout=30
        )
        self._locks = ConnectionPool(svc.pool.conninfo, min_size=0, max_size=LOCK_CONNECTIONS, open=True, timeout=30)
        with self.pool.connection() as conn:
            schema.install(conn)
            base.install(conn)  # a distributed serve may start before any worker made the positions table
        self.keys = KeyStore(self.pool)
        self.audit_log = AuditLog(self.pool)
        self._idempotency = IdempotencyStore(self.pool)
        self._buckets = TokenBuckets()
        self._rates = {
            "write": Rate(settings.api_write_rate_per_s, settings.api_write_burst),
            "recall": Rate(settings.api_recall_rate_per_s, settings.api_recall_burst),
        }
        self._operators = operators

    def close(self) -> None:
        self._locks.close()
        self.pool.close()

    # -- authentication ---------------------------------------------------------------

    def authenticate(self, token: str | None, via: str, acting_as: str | None = None) -> Caller:
        """The caller of bearer ``token`` on route or tool ``via``. The local operator's
        key acts as ``acting_as`` (a principal of the grants file; default: the
        configured one) with that principal's grants; other keys carry their own.

        Raises:
            UnauthenticatedError: no token, an unknown or revoked one (audited).
            UnavailableError: the key store did not answer.
        """
        try:
            with self._stores_guard():
                key = self.keys.authenticate(token)
        except UnauthenticatedError as exc:
            self._audit(via, exc, None, None)
            raise
        if key.operator:
            name = acting_as or self.svc.settings.principal
            operators = self._operators if self._operators is not None else self.svc.principals
            principal = operators.get(name, Principal(id=name))
            return Caller(key, principal, via)
        if acting_as is not None and acting_as != key.principal:
            exc2 = ForbiddenError("principal", f"API key {key.key_id} acts as {key.principal!r} only")
            self._audit(via, exc2, Caller(key, key.as_principal(), via), None)
            raise exc2
        return Caller(key, key.as_principal(), via)

    # -- commands ---------------------------------------------------------------------

    def authorise(self, caller: Caller, action: str, subject_id: str) -> None:
        """Refuse (and audit the refusal) unless the caller's scopes and subject grants
        allow ``action`` (``read``, ``write``, ``erase``) on ``subject_id``.

        Raises:
            ForbiddenError.
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, action, subject_id)

    @contextmanager
    def serialised(self, name: str, timeout_s: float = 10.0) -> Iterator[None]:
        """Hold a PostgreSQL advisory lock on ``name`` for the block, so that blocks on
        the same name run one at a time in every API process sharing the database (the
        memory tool's read, decide and write of one tree of files). The lock has a small
        pool of its own (``LOCK_CONNECTIONS``), so a holder never waits for a connection
        it needs inside the block.

        Raises:
            UnavailableError: the lock was not acquired within ``timeout_s`` seconds.
        """
        busy = UnavailableError("lock", f"busy: another command has held it for over {timeout_s:g} s", 1.0)
        try:
            conn = self._locks.getconn(timeout=timeout_s)
        except PoolTimeout:
            raise busy from None
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{int(timeout_s * 1000)}ms'")
                try:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
                except psycopg.errors.LockNotAvailable:
                    raise busy from None
                yield
        finally:
            self._locks.putconn(conn)

    def write(self, caller: Caller, subject_id: str, req: wire.WriteMemory) -> wire.CommandAck:
        """Record one memory of ``subject_id``; answered once the log has its events.

        Raises:
            ForbiddenError (no write scope or grant), InvalidRequestError (a rule of the
            contract or the retention policy), RateLimitedError, UnavailableError.
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, "write", subject_id)
            self._admit(caller, "write", 1)
            cmd = commands.memory_write(subject_id, req, caller.principal.id)
            return recorded(lambda: self.svc.ledger.write(caller.principal, cmd, supersede_key=req.supersede_key))

    def write_batch(self, caller: Caller, subject_id: str, req: wire.WriteBatch) -> wire.BatchAck:
        """Record several memories of ``subject_id`` in one transaction (all or none);
        each counts against the write rate. Raises as ``write``; a rule one memory broke
        names it by its place in the batch (``memories.1.content``)."""
        with self._guard(caller, subject_id):
            self._authorise(caller, "write", subject_id)
            self._admit(caller, "write", len(req.memories))
            now = utc_now()
            cmds = []
            for i, m in enumerate(req.memories):
                try:
                    cmds.append(commands.memory_write(subject_id, m, caller.principal.id, now))
                except (ValidationError, GatewayError) as exc:
                    raise at_item(exc, "memories", i) from None
            flags = [m.supersede_key for m in req.memories]
            try:
                return batch_recorded(lambda: self.svc.ledger.write_many(caller.principal, cmds, supersede_key=flags))
            except InvalidCommandError as exc:
                if exc.index is None:
                    raise
                raise at_item(exc, "memories", exc.index) from None

    def supersede(self, caller: Caller, subject_id: str, memory_id: str, req: wire.Supersede) -> wire.CommandAck:
        """Replace ``memory_id`` with a new memory (see ``wire.Supersede``).

        Raises:
            NotFoundError: no such memory of the subject; ConflictError: it is no
            longer live; otherwise as ``write``.
        """
        with self._guard(caller, subject_id):
            return recorded(lambda: self._replace(caller, subject_id, [(memory_id, req)])[0])

    def supersede_many(
        self, caller: Caller, subject_id: str, replacements: Sequence[tuple[str, wire.Supersede]]
    ) -> wire.BatchAck:
        """Several supersessions of ``subject_id``'s memories, ``(memory id, replacement)``,
        in one transaction (all or none), in order; each counts against the write rate.
        Raises as ``supersede``, and InvalidRequestError for none at all."""
        with self._guard(caller, subject_id):
            return batch_recorded(lambda: self._replace(caller, subject_id, replacements))

    def _replace(
        self, caller: Caller, subject_id: str, replacements: Sequence[tuple[str, wire.Supersede]]
    ) -> list[CommandResult]:
        """The ledger's supersessions for ``supersede`` and ``supersede_many`` (which hold
        the guard)."""
        self._authorise(caller, "write", subject_id)
        if not replacements:
            raise InvalidRequestError("memory_id", "name at least one memory to replace")
        self._admit(caller, "write", len(replacements))
        reader = self._reader(caller)
        cmds = [
            (
                mid,
                commands.replacement(
                    subject_id, self.svc.ledger.head(reader, subject_id, mid), req, caller.principal.id
                ),
            )
            for mid, req in replacements
        ]
        inherit = [commands.leaves_confirmed(req) for _, req in replacements]
        return self.svc.ledger.supersede_many(caller.principal, cmds, confirmed_if_active=inherit)

    def confirm(self, caller: Caller, subject_id: str, memory_id: str) -> wire.CommandAck:
        """The subject confirmed ``memory_id``. Raises as ``supersede``."""
        with self._guard(caller, subject_id):
            self._authorise(caller, "write", subject_id)
            self._admit(caller, "write", 1)
            return recorded(lambda: self.svc.ledger.confirm(caller.principal, subject_id, memory_id))

    def redact(self, caller: Caller, subject_id: str, memory_id: str, req: wire.Redact) -> wire.CommandAck:
        """Replace the text of ``memory_id``. Raises as ``supersede``."""
        with self._guard(caller, subject_id):
            self._authorise(caller, "write", subject_id)
            self._admit(caller, "write", 1)
            redact = commands.redact_command(memory_id, req)
            return recorded(lambda: self.svc.ledger.redact(caller.principal, subject_id, redact))

    def revoke_consent(self, caller: Caller, subject_id: str, req: wire.RevokeConsent) -> wire.CommandAck:
        """Withdraw consent by reference or purpose. Raises as ``write``."""
        with self._guard(caller, subject_id):
            self._authorise(caller, "write", subject_id)
            self._admit(caller, "write", 1)
            revoke = commands.revoke_command(subject_id, req)
            return recorded(lambda: self.svc.ledger.revoke_consent(caller.principal, revoke))

    def erase(self, caller: Caller, subject_id: str, req: wire.Erase) -> wire.CommandAck:
        """Erase memories of ``subject_id`` (by ids, by source, or all), audited with the
        request id.

        Raises:
            ForbiddenError (no erase scope or grant), NotFoundError (a memory id not of
            the subject), ConflictError (nothing left to erase), InvalidRequestError,
            UnavailableError.
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, "erase", subject_id)
            erase = commands.erase_command(subject_id, req)
            out = recorded(lambda: self.svc.ledger.erase(caller.principal, erase))
            reached = "acknowledgement pending" if out.pending else counted(len(out.affected), "memory", "memories")
            reason = f"erasure {out.request_id} ({_kind(req)}): {reached}"
            self.audit_log.record(caller.via, "ok", reason, **_who(caller, subject_id))
            return out

    # -- reads ------------------------------------------------------------------------

    def recall(self, caller: Caller, subject_id: str, req: wire.Recall) -> wire.RecallResult:
        """Recall for a task, after the positions of ``req.wait_for`` are applied by the
        projections recall reads (facts, vectors, summaries).

        Raises:
            ForbiddenError (no read scope or grant), InvalidRequestError (a recall rule),
            RateLimitedError, UnavailableError (a store down, or the wait timed out).
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, "read", subject_id)
            self._admit(caller, "recall", 1)
            self._wait(req.wait_for, positions.RECALL_READS, req.wait_timeout_s)
            result = self.svc.recall.recall(
                caller.principal,
                subject_id,
                req.purpose,
                req.query,
                req.now or utc_now(),
                k=req.k,
                scope_keys=tuple(req.scope),
                include_unconfirmed=req.include_unconfirmed,
                as_of=req.as_of,
                max_tokens=req.max_tokens,
            )
            return wire.RecallResult.model_validate(result.to_dict())

    def memories(
        self,
        caller: Caller,
        subject_id: str,
        *,
        include_all: bool = False,
        limit: int = 100,
        after: str | None = None,
        wait_for: Sequence[wire.LogPosition] = (),
        wait_timeout_s: float = 5.0,
        purpose: str | None = None,
        key: str | None = None,
        key_prefix: str | None = None,
        unexpired: bool = False,
    ) -> wire.MemoryPage:
        """A page of ``subject_id``'s memories with status, key, revision and what
        superseded what (text, key and the other sealed fields only with a read grant);
        audited as an export. Needs a read or an erase grant. ``purpose``, ``key``,
        ``key_prefix`` and ``unexpired`` (not expired at the server's UTC now) narrow it
        (``projections.memories.list_memories``); narrowing by key needs a read grant,
        since it would tell the key.
        Raises ForbiddenError, NotFoundError, InvalidRequestError, UnavailableError."""
        with self._guard(caller, subject_id):
            content = self._list_grant(caller, subject_id)
            for name, given in (("key", key), ("key_prefix", key_prefix)):
                if given is not None and not content:
                    raise ForbiddenError(name, "narrowing by key needs a read grant: the key is sealed, as the text is")
            self._wait(wait_for, ("facts",), wait_timeout_s)
            page = list_memories(
                self.svc.pool,
                STABLE,
                subject_id,
                include_all=include_all,
                with_content=content,
                limit=limit,
                after=after,
                purpose=purpose,
                key=key,
                key_prefix=key_prefix,
                unexpired_at=utc_now() if unexpired else None,
            )
            listed = counted(len(page.memories), "memory", "memories")
            reason = f"export: {listed}{' with content' if content else ''}"
            self.audit_log.record(caller.via, "ok", reason, **_who(caller, subject_id))
            return wire.MemoryPage(memories=[memory_out(m) for m in page.memories], next_after=page.next_after)

    def memory(
        self,
        caller: Caller,
        subject_id: str,
        memory_id: str,
        wait_for: Sequence[wire.LogPosition] = (),
        wait_timeout_s: float = 5.0,
    ) -> wire.MemoryDetail:
        """One memory of ``subject_id`` and its content-free history (text only with a
        read grant).

        Raises:
            NotFoundError: no memory of the subject has this id (another subject's
                memory is not revealed); ForbiddenError; UnavailableError.
        """
        with self._guard(caller, subject_id):
            content = self._list_grant(caller, subject_id)
            self._wait(wait_for, ("facts",), wait_timeout_s)
            found = get_memory(self.svc.pool, STABLE, subject_id, memory_id, with_content=content)
            if found is None:
                raise UnknownMemoryError(memory_id)
            history = memory_history(self.svc.pool, STABLE, subject_id, memory_id)
            return wire.MemoryDetail(
                memory=memory_out(found), history=[wire.HistoryEntry.model_validate(asdict(h)) for h in history]
            )

    def live_memories(self, caller: Caller, subject_id: str, purpose: str, key_prefix: str) -> list[LiveMemory]:
        """``subject_id``'s live memories for ``purpose`` whose key starts with
        ``key_prefix``, with their text, from the ledger's own state (``Ledger.live``: a
        command just acknowledged is there, whatever the projections' lag); for the
        memory tool, which reads and changes files by key. Needs read; counts as a recall
        against the key's rate.

        Raises:
            ForbiddenError, RateLimitedError, UnavailableError.
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, "read", subject_id)
            self._admit(caller, "recall", 1)
            return self.svc.ledger.live(caller.principal, subject_id, purpose, key_prefix)

    def revisions(self, caller: Caller, subject_id: str, source_refs: Sequence[str]) -> list[str]:
        """The ids of ``subject_id``'s memories, not erased, whose ``source_ref`` is one of
        ``source_refs`` (every revision of a document). Needs read.

        Raises:
            ForbiddenError, UnavailableError.
        """
        with self._guard(caller, subject_id):
            self._authorise(caller, "read", subject_id)
            return [h.memory_id for h in self.svc.ledger.from_sources(caller.principal, subject_id, source_refs)]

    def conflicts(self, caller: Caller, subject_id: str, include_resolved: bool = False) -> list[wire.ConflictOut]:
        """``subject_id``'s conflicts (open ones unless ``include_resolved``). Needs read."""
        with self._guard(caller, subject_id):
            self._authorise(caller, "read", subject_id)
            found = list_conflicts(self.svc.pool, STABLE, subject_id, include_resolved=include_resolved)
            return [wire.ConflictOut.model_validate(c.to_dict()) for c in found]

    def trace(self, caller: Caller, request_id: str) -> wire.TraceOut:
        """Where erasure ``request_id`` was applied, store by store, with live probes;
        audited. Needs the erase grant on the request's subject.

        Raises:
            NotFoundError: no such request, or one of a subject the caller may not
                erase (not revealed); UnavailableError.
        """
        return wire.TraceOut.model_validate(self._trace(caller, request_id, "trace").to_dict())

    def trace_html(self, caller: Caller, request_id: str) -> str:
        """The trace as a self-contained HTML report (``memledger trace --html``). Raises as ``trace``."""
        return render_html(self._trace(caller, request_id, "trace (HTML)"))

    def erasure_report(self, caller: Caller, since: datetime, until: datetime | None = None) -> wire.ErasureReportOut:
        """Every erasure request in ``[since, until)`` of the subjects the caller may
        erase, with trace's verdict (the others counted in ``withheld``); audited.

        Raises:
            ForbiddenError: no erase scope; InvalidRequestError: a naive time or an empty period.
        """
        with self._guard(caller, None):
            self._scope(caller, "erase")
            report = erasure_report(
                self.svc.pool,
                self.svc.trace_targets(),
                since,
                until,
                include=lambda subject: caller.principal.may("erase", subject),
            )
            reason = f"erasure report: {counted(len(report.requests), 'request')}, {report.withheld} withheld"
            self.audit_log.record(caller.via, "ok", reason, **_who(caller, None))
            return wire.ErasureReportOut.model_validate(report.to_dict())

    def lag(self, caller: Caller) -> wire.LagOut:
        """Records each projection version has not applied. Needs the admin scope."""
        with self._guard(caller, None):
            self._scope(caller, "admin")
            return wire.LagOut.model_validate(positions.lag(self.svc))

    def versions(self, caller: Caller) -> list[wire.VersionOut]:
        """Every projection version of the registry. Needs the admin scope."""
        from projections import versions

        with self._guard(caller, None):
            self._scope(caller, "admin")
            with self.svc.pool.connection() as conn:
                found = versions.versions(conn)
            return [wire.VersionOut.model_validate(v.to_dict()) for v in found]

    def authorise_metrics(self, caller: Caller) -> None:
        """Allow ``caller`` to read ``/metrics`` (figures without ids or content, as
        ``lag``). Needs the admin scope.

        Raises:
            ForbiddenError: the key lacks the admin scope (audited).
        """
        with self._guard(caller, None):
            self._scope(caller, "admin")

    def audit(
        self, caller: Caller, limit: int = 100, before: int | None = None, subject_id: str | None = None
    ) -> wire.AuditPage:
        """Audit entries, newest first. Needs the admin scope."""
        with self._guard(caller, None):
            self._scope(caller, "admin")
            if not 1 <= limit <= 1000:
                raise InvalidRequestError("limit", "must be between 1 and 1000")
            entries, older = self.audit_log.list(limit, before, subject_id)
            return wire.AuditPage(
                entries=[wire.AuditEntry.model_validate(asdict(e)) for e in entries], next_before=older
            )

    def wait(self, caller: Caller, req: wire.Wait) -> wire.WaitResult:
        """Block until the projections of ``req`` have applied its positions.

        Raises:
            InvalidRequestError: a position beyond the end of the log.
            UnavailableError: not applied within ``req.timeout_s``.
        """
        with self._guard(caller, None):
            waited = self._wait(req.positions, tuple(req.projections), req.timeout_s)
            return wire.WaitResult(applied=True, waited_ms=round(waited * 1000, 3))

    def fingerprint(self, method: str, path: str, body: object) -> str:
        """A request's fingerprint for its idempotency record (method, path and body under
        the keyring's HMAC key, ``workers.gateway.idempotency.fingerprint``)."""
        return fingerprint(method, path, body, self.svc.keyring.fingerprint)

    def idempotent(
        self,
        caller: Caller,
        key: str | None,
        fingerprint: str,
        run: Callable[[], M],
        model: type[M],
        record: Callable[[M], M] | None = None,
        replay: Callable[[M], M] | None = None,
    ) -> M:
        """``run()``, or with an idempotency ``key`` the result of the first request of
        this principal with that key (see ``workers.gateway.idempotency``; ``record`` and
        ``replay`` as ``IdempotencyStore.once``).

        Raises:
            InvalidRequestError: a malformed key, or one used for another request.
            UnavailableError: another request with the key is still running.
        """
        if key is None:
            return run()
        with self._stores_guard():  # run's own refusals are audited by run
            return self._idempotency.once(caller.principal.id, key, fingerprint, run, model, record, replay)

    def ready(self) -> wire.Ready:
        """Each store answers: PostgreSQL, the event log, Redis, the vector index (a
        probe reports, it does not raise); and the grants file's problem, if it has one
        (its file name only: the probe needs no credential)."""

        def postgres() -> None:
            with self.svc.pool.connection(timeout=5) as conn:
                conn.execute("SELECT 1")

        def vectors() -> None:
            index = self.svc.stores.route().index
            if index is not None:
                index.count()

        checks: list[tuple[str, Callable[[], object]]] = [
            ("postgres", postgres),
            ("log", self.svc.log.end_offsets),
            ("redis", self.svc.stores.redis.ping),
            ("vectors", vectors),
        ]
        out = []
        for name, check in checks:
            try:
                check()
                out.append(wire.StoreCheck(store=name, ok=True, detail="answers"))
            except Exception as exc:  # a readiness probe reports, it does not fail
                out.append(wire.StoreCheck(store=name, ok=False, detail=_first_line(exc)))
        grants = self.svc.grants
        grants.principals()  # read it again if it changed
        problem = None if grants.problem is None else grants.problem.replace(str(grants.path), grants.path.name)
        return wire.Ready(ready=all(c.ok for c in out), mode=self.svc.settings.mode, stores=out, grants_file=problem)

    # -- helpers ----------------------------------------------------------------------

    def _trace(self, caller: Caller, request_id: str, what: str) -> TraceReport:
        with self._guard(caller, None):
            self._scope(caller, "erase")
            with self.svc.pool.connection() as conn:
                row = conn.execute(
                    "SELECT subject_id FROM erasure_requests WHERE request_id = %s", (request_id,)
                ).fetchone()
            if row is None or not caller.principal.may("erase", str(row[0])):
                raise UnknownRequestError(request_id)  # another subject's request is not revealed (nor probed)
            report = trace(self.svc.pool, request_id, self.svc.trace_targets())
            reason = f"{what} of {request_id}: {report.verdict}"
            self.audit_log.record(caller.via, "ok", reason, **_who(caller, report.subject_id))
            return report

    def _scope(self, caller: Caller, scope: str) -> None:
        if scope not in caller.scopes:
            raise ForbiddenError("scope", f"API key {caller.key.key_id} lacks the {scope} scope")

    def _authorise(self, caller: Caller, action: str, subject_id: str) -> None:
        self._scope(caller, action)
        if not caller.principal.may(action, subject_id):  # type: ignore[arg-type]
            raise NotAuthorisedError(caller.principal.id, action, subject_id)

    def _list_grant(self, caller: Caller, subject_id: str) -> bool:
        """Listing needs a read or an erase scope and grant (``Principal.may_list``); returns
        whether text may be shown (read)."""
        if not caller.scopes & {"read", "erase"}:
            self._scope(caller, "read")  # raises, naming the read scope a listing needs
        return caller.principal.may_list(subject_id, caller.scopes)

    def _reader(self, caller: Caller) -> Principal:
        """The caller reading a head to default a replacement: a writer may read what it replaces."""
        return Principal(id=caller.principal.id, grants=caller.principal.grants + _read_as_write(caller.principal))

    def _admit(self, caller: Caller, kind: str, tokens: int) -> None:
        wait_s = self._buckets.take(f"{kind}:{caller.key.key_id}", self._rates[kind], tokens)
        if wait_s > 0:
            raise RateLimitedError(
                "rate", f"API key {caller.key.key_id} is over its {kind} rate; retry in {wait_s:.2f} s", wait_s
            )

    def _wait(self, at: Sequence[wire.LogPosition], names: Sequence[str], timeout_s: float) -> float:
        if not at:
            return 0.0
        return positions.wait_applied(self.svc, [(p.partition, p.offset) for p in at], names, timeout_s)

    def _audit(self, via: str, exc: GatewayError, caller: Caller | None, subject_id: str | None) -> None:
        try:
            if caller is None:
                self.audit_log.record(via, "refused", f"{exc.kind}: {exc}", subject_id=subject_id)
            else:
                self.audit_log.record(via, "refused", f"{exc.kind}: {exc}", **_who(caller, subject_id))
        except (psycopg.Error, PoolTimeout) as err:  # the refusal stands; the audit store is down
            log.error("audit record lost (%s): %s %s", err, via, exc)

    @contextmanager
    def _stores_guard(self) -> Iterator[None]:
        try:
            yield
        except _STORE_ERRORS as exc:
            raise UnavailableError("store", _first_line(exc), STORE_DOWN_RETRY_S) from None
        except EventLogError as exc:
            raise UnavailableError("log", _first_line(exc), STORE_DOWN_RETRY_S) from None

    @contextmanager
    def _guard(self, caller: Caller, subject_id: str | None) -> Iterator[None]:
        """Turn the errors of the ledger and the projections into gateway errors, and
        audit the refusals."""
        try:
            with self._stores_guard():
                yield
        except GatewayError as exc:
            if exc.kind in AUDITED:
                self._audit(caller.via, exc, caller, subject_id)
            raise
        except (LedgerError, RecallError, UnknownRequestError, ValidationError, ValueError) as exc:
            err = translate(exc)
            if err.kind in AUDITED:
                self._audit(caller.via, err, caller, subject_id)
            raise err from None


def translate(exc: Exception) -> GatewayError:
    """The gateway error of an error of the ledger, the projections or the contract. A
    command that was not written (``NotWrittenError``) is a store that is down: safe to
    send again after ``Retry-After``; one whose outcome is unknown says how to find out."""
    if isinstance(exc, NotWrittenError):
        return UnavailableError("store", _first_line(exc), STORE_DOWN_RETRY_S)
    if isinstance(exc, OutcomeUnknownError):
        return UnavailableError("store", _first_line(exc), STORE_DOWN_RETRY_S)
    if isinstance(exc, NotAuthorisedError):
        return ForbiddenError(exc.field, exc.rule)
    if isinstance(exc, UnknownMemoryError):
        return NotFoundError(*fields.refusal(exc.field, exc.rule, "http"))
    if isinstance(exc, UnknownRequestError):
        return NotFoundError("request_id", f"no erasure request {exc.request_id!r} is known")
    if isinstance(exc, InvalidCommandError):
        field, rule = fields.refusal(exc.field, exc.rule, "http")  # in the body's names
        return ConflictError(field, rule) if _STATE_RULE.search(rule) else InvalidRequestError(field, rule)
    if isinstance(exc, RecallError):
        return InvalidRequestError(*fields.refusal(exc.field, exc.rule, "http"))
    if isinstance(exc, ValidationError):
        field, _ = fields.validation_problems(exc, "http")[0]
        text = fields.describe_validation(exc, "http")
        if not field:  # a rule of the whole command that names no field
            return InvalidRequestError("body", text)
        return InvalidRequestError(field, text.removeprefix(f"{field}: "))
    if isinstance(exc, EventLogError):
        return UnavailableError("log", _first_line(exc), STORE_DOWN_RETRY_S)
    field, sep, rule = fields.line(str(exc), "http").partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_.\-]+", field):
        return InvalidRequestError(field, rule)
    return InvalidRequestError("request", str(exc))


def at_item(exc: Exception, items: str, index: int) -> GatewayError:
    """The gateway error of ``exc`` (``translate``, or ``exc`` itself when it is one)
    with its field named inside item ``index`` of the batch field ``items``, as the
    HTTP API names a field of the request body's own (``memories.1.content``)."""
    err = exc if isinstance(exc, GatewayError) else translate(exc)
    return type(err)(f"{items}.{index}.{err.field}", err.rule, err.retry_after_s)


def recorded(run: Callable[[], CommandResult]) -> wire.CommandAck:
    """The acknowledgement of the ledger command ``run``; a command recorded whose log
    acknowledgement was lost (``AcknowledgementLostError``) is acknowledged as
    ``pending``: it happened, the relay publishes its events, and it must not be sent
    again (a 503 would invite a retry that records it twice)."""
    try:
        return ack(run())
    except AcknowledgementLostError as exc:
        return pending_ack(exc)


def pending_ack(exc: AcknowledgementLostError) -> wire.CommandAck:
    """The acknowledgement of a command recorded whose log acknowledgement was lost:
    ``pending``, no positions, and what it produced (the HTTP answer, and the CLI's
    ``--json`` one)."""
    return wire.CommandAck(
        memory_id=exc.memory_id,
        request_id=exc.request_id,
        affected=list(exc.affected),
        events=_event_refs(exc),
        positions=[],
        pending=True,
        reinstated=list(exc.reinstated),
        earlier_versions=list(exc.earlier_versions),
        rivals_reinstated=list(exc.rivals_reinstated),
    )


def batch_recorded(run: Callable[[], Sequence[CommandResult]]) -> wire.BatchAck:
    """``recorded`` for a batch: one acknowledgement per result, or, when the log's
    acknowledgement was lost, ``pending`` with the batch's events."""
    try:
        return wire.BatchAck(results=[ack(r) for r in run()])
    except AcknowledgementLostError as exc:
        return wire.BatchAck(results=[], pending=True, pending_events=_event_refs(exc))


def _event_refs(exc: AcknowledgementLostError) -> list[wire.EventRef]:
    types = exc.event_types or ("unknown",) * len(exc.event_ids)
    return [wire.EventRef(event_id=i, type=t) for i, t in zip(exc.event_ids, types, strict=True)]


def ack(r: CommandResult) -> wire.CommandAck:
    """The wire form of a ledger command's result."""
    screening = r.screening
    return wire.CommandAck(
        memory_id=r.memory_id,
        request_id=r.request_id,
        affected=list(r.affected),
        events=[wire.EventRef(event_id=e.event_id, type=e.type) for e in r.events],
        positions=[wire.LogPosition(partition=p.partition, offset=p.offset) for p in r.positions],
        repeat=r.repeat,
        first_event_ids=list(r.first_event_ids),
        screening=None if screening is None else wire.ScreeningOut.model_validate(screening.model_dump(mode="json")),
        reinstated=list(r.reinstated),
        earlier_versions=list(r.earlier_versions),
        rivals_reinstated=list(r.rivals_reinstated),
    )


def memory_out(entry: object) -> wire.MemoryOut:
    """The wire form of a ``projections.memories.MemoryEntry``."""
    return wire.MemoryOut.model_validate(asdict(entry))  # type: ignore[call-overload]


def _read_as_write(principal: Principal) -> tuple[Grant, ...]:
    return tuple(Grant(subjects=g.subjects, actions=("read",)) for g in principal.grants if "write" in g.actions)


def _kind(req: wire.Erase) -> str:
    return "subject" if req.whole_subject else "source" if req.source is not None else "memories"


def _who(caller: Caller, subject_id: str | None) -> dict[str, str | None]:
    return {"principal": caller.principal.id, "key_id": caller.key.key_id, "subject_id": subject_id}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
