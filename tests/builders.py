"""Small builders shared by tests: commands with sensible defaults."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import MemoryWrite, utc_now
from projections.evidence import RecallItem
from projections.ranking.candidates import Candidate

PURPOSE = "technical_writing"


def memory_write(subject: str = "alice", content: str = "Alice prefers short answers", **fields: Any) -> MemoryWrite:
    """A valid ``MemoryWrite`` from a turn of its own (a new turn id each call: the same
    write again is a restatement, not a retry); keyword arguments override or add fields."""
    body: dict[str, Any] = {
        "subject_id": subject,
        "kind": "preference",
        "content": content,
        "purpose": PURPOSE,
        "scope": {"type": "subject", "id": subject},
        "provenance": {"writer": "test-agent", "written_at": utc_now(), "turn_id": f"t-{uuid.uuid4().hex[:8]}"},
        "confirmed": True,
    }
    body.update(fields)
    return MemoryWrite.model_validate(body)


def later(days: float = 30) -> datetime:
    return utc_now() + timedelta(days=days)


def recall_item(memory_id: str, score: float = 0.03, **fields: Any) -> RecallItem:
    """A ``RecallItem`` of subject alice (an active, confirmed fact); keyword arguments
    override or add fields."""
    base: dict[str, Any] = {
        "memory_id": memory_id,
        "subject_id": "alice",
        "kind": "fact",
        "content": f"text of {memory_id}",
        "score": score,
        "status": "active",
        "confirmed": True,
        "confidence": 1.0,
        "key": None,
        "purpose": "p",
        "scope": {"type": "subject", "id": "alice"},
        "provenance": {"writer": "w", "written_at": "2026-11-29T10:00:00.123456Z", "derived_from": []},
        "revision": 1,
        "expires_at": None,
        "sensitivity": "internal",
        "needs_confirmation": False,
        "matched_by": ["fts"],
    }
    return RecallItem(**(base | fields))


def candidate(memory_id: str, **fields: Any) -> Candidate:
    """A ranking ``Candidate`` of subject alice (an active, confirmed fact written on
    2026-01-01); keyword arguments override fields."""
    base: dict[str, Any] = {
        "memory_id": memory_id,
        "kind": "fact",
        "status": "active",
        "key": None,
        "scope": {"type": "subject", "id": "alice"},
        "derived_from": [],
        "source_ref": None,
        "written_at": datetime(2026, 1, 1, tzinfo=UTC),
        "confidence": 1.0,
        "confirmed": True,
    }
    return Candidate(**(base | fields))
