"""Commands: imperative requests to the ledger. A command may be refused; an event
(``contracts.events``) is what happened once it was accepted."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from contracts.base import Frozen
from contracts.memory import Provenance, Retention, Scope
from contracts.types import Content, Kind, NonEmptyStr, Sensitivity, Veracity, with_article


class MemoryWrite(Frozen):
    """Write a new memory about ``subject_id``.

    The ledger checks that the calling principal holds a grant for ``subject_id``;
    the subject is never taken on trust from the body alone. ``confidence`` defaults
    to the value for ``veracity`` (DESIGN.md: stated 1.0, inferred 0.7, imported 0.6,
    tool 0.5).

    Raises:
        pydantic.ValidationError: naming the field and the rule, for a naive datetime,
            an unknown field, an empty subject, a missing ``provenance.writer`` or a
            confidence outside [0, 1].
    """

    subject_id: NonEmptyStr
    kind: Kind
    content: Content
    purpose: NonEmptyStr
    scope: Scope
    provenance: Provenance
    key: NonEmptyStr | None = None
    sensitivity: Sensitivity = "internal"
    retention: Retention = Field(default_factory=Retention)
    confirmed: bool = False
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    veracity: Veracity = "stated"

    @field_validator("confidence", mode="before")
    @classmethod
    def _finite_confidence(cls, value: object) -> object:
        """NaN, infinity and values outside [0, 1] get one message: the bounds alone
        refuse NaN with "less than or equal to 1", as if it were too large."""
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return value  # not a number at all: the float type says so
        if isinstance(number, int | float) and not isinstance(number, bool):
            if not (math.isfinite(number) and 0.0 <= number <= 1.0):
                raise ValueError(f"must be a finite number between 0 and 1, got {value!r}")
        return value

    @model_validator(mode="after")
    def _rules(self) -> MemoryWrite:
        if self.scope.type == "subject" and self.scope.id != self.subject_id:
            raise ValueError("scope.id: a subject scope must name the memory's own subject_id")
        if self.kind in ("inference", "summary") and not self.provenance.derived_from:
            raise ValueError(
                f"provenance.derived_from: {with_article(self.kind)} must name the memories it was derived from"
            )
        return self


class EraseMemories(Frozen):
    """Erase memories of ``subject_id``: exactly one of

    - ``memory_ids``: the listed memories;
    - ``whole_subject``: every memory of the subject;
    - ``source_ref``: every memory of the subject whose provenance names this source,
      i.e. whose ``provenance.turn_id``, ``provenance.tool_call_id`` or
      ``provenance.source_ref`` equals it (a conversation turn, a tool call or a
      document).

    Memories derived from the erased ones are erased with them. With ``with_history``,
    so is every earlier version of each one: every memory it superseded, directly or
    through a chain of supersessions (without it, an earlier version keeps its content,
    and one replaced by a memory that was live when erased is live again, awaiting
    confirmation: see ``MemoryReinstated``). Erasure is irreversible.

    Raises:
        pydantic.ValidationError: ``memory_ids`` when none or more than one target is
            given.
    """

    subject_id: NonEmptyStr
    memory_ids: tuple[NonEmptyStr, ...] = ()
    whole_subject: bool = False
    source_ref: NonEmptyStr | None = None
    reason: NonEmptyStr
    legal_basis: NonEmptyStr = "gdpr-art-17"
    with_history: bool = False

    @model_validator(mode="after")
    def _target(self) -> EraseMemories:
        given = sum((bool(self.memory_ids), self.whole_subject, self.source_ref is not None))
        if given != 1:
            raise ValueError(
                "memory_ids: give exactly one of memory ids, the whole subject (--all) or a source (--source)"
            )
        return self

    @property
    def request_kind(self) -> Literal["memories", "subject", "source"]:
        """``memories``, ``subject`` or ``source``: what ``ErasureRequested.request_kind`` records."""
        if self.whole_subject:
            return "subject"
        return "source" if self.source_ref is not None else "memories"


class RevokeConsent(Frozen):
    """Withdraw consent: every active memory of ``subject_id`` whose
    ``provenance.consent_ref`` equals ``consent_ref`` or whose purpose equals
    ``purpose`` becomes unusable.

    The withdrawal is recorded for good (nothing is written under it again), so a
    ``consent_ref`` or ``purpose`` that matches no memory of the subject is refused as a
    likely typo unless ``allow_unmatched`` is set: consent withdrawn before anything was
    written under it.
    """

    subject_id: NonEmptyStr
    consent_ref: NonEmptyStr | None = None
    purpose: NonEmptyStr | None = None
    allow_unmatched: bool = False

    @model_validator(mode="after")
    def _target(self) -> RevokeConsent:
        if self.consent_ref is None and self.purpose is None:
            raise ValueError("consent_ref: a revocation needs a consent_ref or a purpose")
        return self


class RedactMemory(Frozen):
    """Replace the text of one memory with ``replacement`` (for example the content
    with a phone number removed); ``fields`` names what was redacted, for the record."""

    memory_id: NonEmptyStr
    replacement: str = Field(max_length=65_536)
    fields: tuple[NonEmptyStr, ...] = ("content",)
