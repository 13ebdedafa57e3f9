"""A stage for read-side tests: the facts, summaries and vectors projections, recall and
the recall cache on the real stores, fed with hand-built events (sealed like the ledger
seals them), with the data keys destroyed when the ledger would destroy them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool

from contracts import (
    PERSONAL_CONTEXT,
    ClearProvenance,
    ConflictDetected,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryReinforced,
    MemorySuperseded,
    MemoryWritten,
    RetentionExpired,
    SummaryDerived,
)
from contracts.events import MemoryRef, RedactedState
from contracts.memory import MemoryBody, PersonalFields, Provenance, Scope
from ledger.crypto import Keyring
from ledger.eventlog import LogPosition
from ledger.principals import Grant, Principal
from projections.base import PositionedProjection
from projections.recall import RecallResult
from tests.builders import PURPOSE

READER = Principal(id="reader", grants=(Grant(subjects=("*",), actions=("read",)),))
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
"""The time of the first event; each event is one second after the one before."""


@dataclass
class Stage:
    """Seals, builds and applies events to every projection, in one log order."""

    pool: ConnectionPool
    keyring: Keyring
    projections: Sequence[PositionedProjection]
    subject: str = "alice"
    log: list[Event] = field(default_factory=list)
    revisions: dict[str, int] = field(default_factory=dict)

    # -- building events ----------------------------------------------------------------

    def _env(self) -> dict[str, Any]:
        return {
            "event_id": str(uuid.uuid4()),
            "occurred_at": T0 + timedelta(seconds=len(self.log)),
            "subject_id": self.subject,
            "producer": "test",
            "correlation_id": "c",
        }

    def _next(self, memory_id: str) -> int:
        self.revisions[memory_id] = self.revisions[memory_id] + 1
        return self.revisions[memory_id]

    def _ref(self, memory_id: str) -> MemoryRef:
        return MemoryRef(memory_id=memory_id, revision=self._next(memory_id))

    def write(self, text: str, **fields: Any) -> str:
        """Append and apply a ``MemoryWritten`` (``SummaryDerived`` for kind summary, with
        ``replaces`` when given); ``fields`` override the body; returns the memory id."""
        memory_id = str(uuid.uuid4())
        replaces = fields.pop("replaces", None)
        provenance = Provenance.model_validate(
            {"writer": "agent", "written_at": T0, "turn_id": "t-1", **fields.pop("provenance", {})}
        )
        personal = PersonalFields.of(fields.pop("key", None), Scope(type="subject", id=self.subject), provenance)
        with self.pool.connection() as conn:
            sealed = self.keyring.seal(conn, self.subject, memory_id, text)
            sealed_personal = self.keyring.seal(
                conn, self.subject, memory_id, personal.model_dump_json(), PERSONAL_CONTEXT
            )
        body = MemoryBody.model_validate(
            {
                "kind": "preference",
                "content": sealed,
                "personal": sealed_personal,
                "purpose": PURPOSE,
                "scope_type": "subject",
                "provenance": ClearProvenance.of(provenance),
                "confirmed": True,
                "confidence": 0.8,
                "content_hmac": self.keyring.fingerprint(text),
                **fields,
            }
        )
        self.revisions[memory_id] = 1
        if body.kind == "summary":
            self.apply(SummaryDerived(**self._env(), memory_id=memory_id, memory=body, replaces=replaces))
        else:
            self.apply(MemoryWritten(**self._env(), memory_id=memory_id, memory=body))
        return memory_id

    def reinforce(self, memory_id: str, confidence: float) -> None:
        prov = ClearProvenance(writer="agent", written_at=T0)
        rev = self._next(memory_id)
        self.apply(
            MemoryReinforced(**self._env(), memory_id=memory_id, revision=rev, confidence=confidence, provenance=prov)
        )

    def conflict(self, *memory_ids: str) -> str:
        """``ConflictDetected`` among ``memory_ids`` (their slot's key and scope id are
        in their own sealed fields, as the ledger writes it)."""
        conflict_id = f"cf-{uuid.uuid4()}"
        affected = tuple(self._ref(m) for m in memory_ids)
        self.apply(
            ConflictDetected.model_validate(
                {
                    **self._env(),
                    "conflict_id": conflict_id,
                    "purpose": PURPOSE,
                    "scope_type": "subject",
                    "affected": affected,
                }
            )
        )
        return conflict_id

    def supersede(self, memory_id: str, by: str) -> None:
        self.apply(
            MemorySuperseded(**self._env(), memory_id=memory_id, revision=self._next(memory_id), superseded_by=by)
        )

    def confirm(self, memory_id: str) -> None:
        self.apply(MemoryConfirmed(**self._env(), memory_id=memory_id, revision=self._next(memory_id)))

    def redact(self, memory_id: str, replacement: str, kind: str = "preference", key: str | None = None) -> None:
        """Seal the replacement (and the memory's personal fields, here its ``key``, a
        subject scope and turn ``t-1``) under ``<id>/<rev>`` and destroy the older keys, as
        the ledger does."""
        rev = self._next(memory_id)
        key_id = f"{memory_id}/{rev}"
        personal = PersonalFields(key=key, scope_id=self.subject, turn_id="t-1")
        with self.pool.connection() as conn:
            sealed = self.keyring.seal(conn, self.subject, key_id, replacement)
            sealed_personal = self.keyring.seal(
                conn, self.subject, key_id, personal.model_dump_json(), PERSONAL_CONTEXT
            )
            self.keyring.destroy(conn, [memory_id], keep=key_id)
        state = RedactedState.model_validate(
            {"status": "active", "kind": kind, "purpose": PURPOSE, "scope_type": "subject"}
        )
        self.apply(
            MemoryRedacted(
                **self._env(),
                memory_id=memory_id,
                revision=rev,
                fields=("content",),
                content=sealed,
                content_hmac=self.keyring.fingerprint(replacement),
                state=state,
                personal=sealed_personal,
            )
        )

    def revoke(self, *memory_ids: str) -> None:
        """Destroy the keys (grace 0), then ``ConsentRevoked``."""
        self.destroy(memory_ids)
        self.apply(ConsentRevoked(**self._env(), affected=tuple(self._ref(m) for m in memory_ids)))

    def expire(self, *memory_ids: str, reason: str = "expires_at") -> None:
        """Destroy the keys, then ``RetentionExpired``."""
        self.destroy(memory_ids)
        affected = tuple(self._ref(m) for m in memory_ids)
        self.apply(RetentionExpired.model_validate({**self._env(), "affected": affected, "reason": reason}))

    def erase(self, *memory_ids: str) -> None:
        """Tombstone and destroy the keys, then ``ErasureRequested``."""
        request_id = f"er-{uuid.uuid4()}"
        self.destroy(memory_ids)
        with self.pool.connection() as conn:
            for m in memory_ids:
                conn.execute(
                    "INSERT INTO tombstones (memory_id, subject_id, request_id, erased_at) VALUES (%s, %s, %s, now())",
                    (m, self.subject, request_id),
                )
        affected = tuple(self._ref(m) for m in memory_ids)
        self.apply(
            ErasureRequested(
                **self._env(),
                request_id=request_id,
                request_kind="memories",
                requested_by="test",
                reason="asked",
                legal_basis="gdpr-art-17",
                affected=affected,
            )
        )

    def destroy(self, memory_ids: Sequence[str]) -> None:
        with self.pool.connection() as conn:
            self.keyring.destroy(conn, list(memory_ids))

    # -- applying -----------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Append ``event`` to the stage's log and apply it to every projection."""
        position = LogPosition(0, len(self.log))
        self.log.append(event)
        for projection in self.projections:
            projection.apply(event, position)

    def replay(self) -> None:
        """Reset every projection and apply the whole log again, in one batch each."""
        items = [(e, LogPosition(0, n)) for n, e in enumerate(self.log)]
        for projection in self.projections:
            projection.reset()
            projection.apply_batch(items)


def ids(result: RecallResult) -> list[str]:
    """Top-level ids of a recall result."""
    return [i.memory_id for i in result.items]
