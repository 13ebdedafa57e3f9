"""An evolved contract for tests of schema evolution: ``MemoryWritten`` at version 3.

- v1 -> v2 renamed the envelope field ``producer`` to ``emitted_by`` on the wire;
- v2 -> v3 renamed ``correlation_id`` to ``trace_id`` on the wire.

The Python attribute names stay (the models subclass ``MemoryWritten``), so projections
written against ``MemoryWritten`` apply the evolved events unchanged; every other event
type stays at version 1, which is what per-type schema versions allow.
"""

from __future__ import annotations

from pydantic import Field

from contracts import MemoryWritten
from contracts.types import NonEmptyStr
from contracts.upcasting import RawEvent, Upcaster


class MemoryWrittenV3(MemoryWritten):
    """``MemoryWritten`` as the evolved contract has it (version 3)."""

    schema_version: int = Field(default=3, ge=1, strict=True)
    producer: NonEmptyStr = Field(alias="emitted_by")
    correlation_id: NonEmptyStr = Field(alias="trace_id")


def rename(old: str, new: str) -> Upcaster:
    """An upcaster that renames the top-level field ``old`` to ``new``."""

    def step(raw: RawEvent) -> RawEvent:
        raw[new] = raw.pop(old)
        return raw

    return step


UPCASTERS_V3: dict[tuple[str, int], Upcaster] = {
    ("MemoryWritten", 1): rename("producer", "emitted_by"),
    ("MemoryWritten", 2): rename("correlation_id", "trace_id"),
}
"""The steps from ``MemoryWritten`` v1 to v3."""

MODELS_V3 = (MemoryWrittenV3,)
"""The models the evolved contract replaces."""
