"""The parts of a memory record: scope, provenance, retention, and the record body.

Field meanings follow DESIGN.md ("The memory record").
"""

from __future__ import annotations

import base64
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from contracts.base import Frozen
from contracts.screening import Screening
from contracts.types import (
    Kind,
    NonEmptyStr,
    RetentionBasis,
    ScopeType,
    Sensitivity,
    UtcDatetime,
    Veracity,
)

Base64Text = Annotated[str, StringConstraints(min_length=1, max_length=360_000, pattern=r"^[A-Za-z0-9_=-]+$")]
"""URL-safe base64 text, up to 360,000 characters (a sealed 65,536-character memory of
multi-byte text fits)."""


class Scope(Frozen):
    """Where a memory may be used: one document, one workspace, or the whole subject.

    For ``type="subject"`` the ``id`` is the subject id itself.
    """

    type: ScopeType
    id: NonEmptyStr


class Provenance(Frozen):
    """Where a memory came from.

    ``writer`` (agent or component identity) and ``written_at`` (UTC) are required;
    ``derived_from`` lists the memory ids an inference or summary was derived from.
    Where a principal authenticates (``memledger serve``, the CLI), ``writer`` is that
    principal; ``agent`` is the calling agent's own label, recorded as such (free text,
    never taken for a principal).
    """

    writer: NonEmptyStr
    written_at: UtcDatetime
    agent: NonEmptyStr | None = None
    turn_id: NonEmptyStr | None = None
    tool_call_id: NonEmptyStr | None = None
    consent_ref: NonEmptyStr | None = None
    source_ref: NonEmptyStr | None = None
    derived_from: tuple[NonEmptyStr, ...] = ()


class Retention(Frozen):
    """How long a memory may be kept: ``expires_at`` (UTC, or ``None`` for no limit)
    and the legal ``basis`` for keeping it."""

    basis: RetentionBasis = "indefinite"
    expires_at: UtcDatetime | None = None


class SealedText(Frozen):
    """Text encrypted with AES-GCM under a per-memory data key (see ``ledger.crypto``).

    ``key_id`` names the data key in the key store; ``nonce`` and ``ciphertext`` are
    URL-safe base64. Once the key is destroyed the text cannot be recovered.
    """

    key_id: NonEmptyStr
    nonce: Base64Text
    ciphertext: Base64Text

    @model_validator(mode="after")
    def _well_formed(self) -> SealedText:
        try:
            nonce = base64.urlsafe_b64decode(self.nonce)
            ciphertext = base64.urlsafe_b64decode(self.ciphertext)
        except ValueError:
            raise ValueError("nonce, ciphertext: must be URL-safe base64") from None
        if len(nonce) != 12:
            raise ValueError("nonce: must be 12 bytes (AES-GCM)")
        if len(ciphertext) < 16:
            raise ValueError("ciphertext: shorter than the 16-byte AES-GCM tag")
        return self


class ClearProvenance(Frozen):
    """The parts of :class:`Provenance` the log keeps in clear: which component wrote the
    memory, when (UTC), and which memories it was derived from. The references that can
    name the subject's own material (turn, tool call, consent, source) are sealed in
    :class:`PersonalFields`. ``agent`` (the calling agent's own label, beside the
    authenticated ``writer``) is absent from events written before it existed: they read
    as ``None``, with no schema version change."""

    writer: NonEmptyStr
    written_at: UtcDatetime
    derived_from: tuple[NonEmptyStr, ...] = ()
    agent: NonEmptyStr | None = None

    @classmethod
    def of(cls, provenance: Provenance) -> ClearProvenance:
        """The clear part of a command's provenance."""
        return cls(
            writer=provenance.writer,
            written_at=provenance.written_at,
            derived_from=provenance.derived_from,
            agent=provenance.agent,
        )


class PersonalFields(Frozen):
    """The fields of a memory besides its text that can identify or describe the subject:
    the attribute ``key``, the ``scope_id`` (a document or workspace id, or the subject's
    own id) and the provenance references. Events carry them sealed (JSON, AES-GCM under
    the memory's data key, see ``ledger.crypto``), so destroying the key makes them as
    unreadable as the text."""

    key: NonEmptyStr | None = None
    scope_id: NonEmptyStr
    turn_id: NonEmptyStr | None = None
    tool_call_id: NonEmptyStr | None = None
    consent_ref: NonEmptyStr | None = None
    source_ref: NonEmptyStr | None = None

    @classmethod
    def of(cls, key: str | None, scope: Scope, provenance: Provenance) -> PersonalFields:
        """The personal fields of a command's memory."""
        return cls(
            key=key,
            scope_id=scope.id,
            turn_id=provenance.turn_id,
            tool_call_id=provenance.tool_call_id,
            consent_ref=provenance.consent_ref,
            source_ref=provenance.source_ref,
        )

    def references(self) -> dict[str, str | None]:
        """The provenance references: ``turn_id``, ``tool_call_id``, ``consent_ref``, ``source_ref``."""
        return self.model_dump(include={"turn_id", "tool_call_id", "consent_ref", "source_ref"})


PERSONAL_CONTEXT = "personal"
"""Associated-data context under which :class:`PersonalFields` are sealed (so that a
sealed text and the sealed personal fields of one memory cannot be swapped)."""


def full_provenance(clear: ClearProvenance, personal: PersonalFields | None) -> dict[str, object]:
    """The provenance of a memory as JSON (the shape of :class:`Provenance`): its clear
    part and, when they could be opened, its sealed references (else they are absent)."""
    out: dict[str, object] = clear.model_dump(mode="json")
    if personal is not None:
        out.update({k: v for k, v in personal.references().items() if v is not None})
    return out


class MemoryBody(Frozen):
    """What a ``MemoryWritten`` or ``SummaryDerived`` event carries about the memory.

    ``content`` and ``personal`` (a :class:`PersonalFields` as JSON) are sealed under the
    memory's data key: the log never holds memory text, key, scope id or provenance
    references in clear. In clear: kind, purpose, scope type, sensitivity, retention,
    confirmation, confidence, veracity, the writer and the ids it was derived from.
    """

    kind: Kind
    content: SealedText
    personal: SealedText
    purpose: NonEmptyStr
    scope_type: ScopeType
    provenance: ClearProvenance
    sensitivity: Sensitivity = "internal"
    retention: Retention = Field(default_factory=Retention)
    confirmed: bool = False
    confidence: float = Field(ge=0.0, le=1.0)
    veracity: Veracity = "stated"
    content_hmac: NonEmptyStr | None = None
    """A keyed HMAC-SHA256 of the clear content (hex): lets probes find copies
    without keeping the content."""
    screening: Screening | None = None
    """What screening at the write boundary found in the text and did about it
    (``contracts.screening``); ``None`` for a memory the ledger wrote itself (a
    regenerated summary) or one written before screening existed."""

    @model_validator(mode="after")
    def _summary_has_sources(self) -> MemoryBody:
        if self.kind == "summary" and not self.provenance.derived_from:
            raise ValueError("provenance.derived_from: a summary must name the memories it was derived from")
        return self
