"""Small builders shared by tests: commands with sensible defaults."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from contracts import MemoryWrite, utc_now

PURPOSE = "technical_writing"


def memory_write(subject: str = "alice", content: str = "Alice prefers short answers", **fields: Any) -> MemoryWrite:
    """A valid ``MemoryWrite``; keyword arguments override or add fields."""
    body: dict[str, Any] = {
        "subject_id": subject,
        "kind": "preference",
        "content": content,
        "purpose": PURPOSE,
        "scope": {"type": "subject", "id": subject},
        "provenance": {"writer": "test-agent", "written_at": utc_now(), "turn_id": "t-1"},
        "confirmed": True,
    }
    body.update(fields)
    return MemoryWrite.model_validate(body)


def later(days: float = 30) -> datetime:
    return utc_now() + timedelta(days=days)
