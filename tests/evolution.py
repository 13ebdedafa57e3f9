"""An evolved contract for tests of schema evolution: ``MemoryWritten`` at version 4, two
versions past this code's (version 2, which added ``memory.screening``):

- v2 -> v3 renamed the envelope field ``producer`` to ``emitted_by`` on the wire;
- v3 -> v4 renamed ``correlation_id`` to ``trace_id`` on the wire.

The Python attribute names stay (the model subclasses ``MemoryWritten``), so projections
written against ``MemoryWritten`` apply the evolved events unchanged; the v1 -> v2 step
is this code's own (``contracts.upcasting.UPCASTERS``); every other event type stays at
its version, which is what per-type schema versions allow.
"""

from __future__ import annotations

from pydantic import Field

from contracts import SCHEMA_VERSIONS, MemoryWritten
from contracts.types import NonEmptyStr
from contracts.upcasting import RawEvent, Upcaster

CURRENT = SCHEMA_VERSIONS["MemoryWritten"]
"""This code's version of ``MemoryWritten`` (the evolved contract starts from it)."""
EVOLVED = CURRENT + 2
"""The evolved contract's version of ``MemoryWritten``."""


class MemoryWrittenEvolved(MemoryWritten):
    """``MemoryWritten`` as the evolved contract has it (version ``EVOLVED``)."""

    schema_version: int = Field(default=EVOLVED, ge=1, strict=True)
    producer: NonEmptyStr = Field(alias="emitted_by")
    correlation_id: NonEmptyStr = Field(alias="trace_id")


def rename(old: str, new: str) -> Upcaster:
    """An upcaster that renames the top-level field ``old`` to ``new``."""

    def step(raw: RawEvent) -> RawEvent:
        raw[new] = raw.pop(old)
        return raw

    return step


UPCASTERS_EVOLVED: dict[tuple[str, int], Upcaster] = {
    ("MemoryWritten", CURRENT): rename("producer", "emitted_by"),
    ("MemoryWritten", CURRENT + 1): rename("correlation_id", "trace_id"),
}
"""The steps from this code's ``MemoryWritten`` to the evolved one."""

MODELS_EVOLVED = (MemoryWrittenEvolved,)
"""The models the evolved contract replaces."""
