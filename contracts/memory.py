"""The parts of a memory record: scope, provenance, retention, and the record body.

Field meanings follow DESIGN.md ("The memory record").
"""

from __future__ import annotations

import base64
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

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


class Frozen(BaseModel):
    """Base of every contract model: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


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
    """

    writer: NonEmptyStr
    written_at: UtcDatetime
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


class MemoryBody(Frozen):
    """What a ``MemoryWritten`` or ``SummaryDerived`` event carries about the memory.

    ``content`` is sealed: the log never holds memory text in clear.
    """

    kind: Kind
    content: SealedText
    key: NonEmptyStr | None = None
    purpose: NonEmptyStr
    scope: Scope
    provenance: Provenance
    sensitivity: Sensitivity = "internal"
    retention: Retention = Field(default_factory=Retention)
    confirmed: bool = False
    confidence: float = Field(ge=0.0, le=1.0)
    veracity: Veracity = "stated"
    content_hmac: NonEmptyStr | None = None
    """A keyed HMAC-SHA256 of the clear content (hex): lets probes find copies
    without keeping the content."""

    @model_validator(mode="after")
    def _summary_has_sources(self) -> MemoryBody:
        if self.kind == "summary" and not self.provenance.derived_from:
            raise ValueError("provenance.derived_from: a summary must name the memories it was derived from")
        return self
