"""Events: past-tense facts appended to the log, one discriminated union.

Every event carries the envelope of DESIGN.md ("Events"): ``event_id`` (UUIDv7),
``type``, ``schema_version``, ``occurred_at`` (UTC), ``subject_id`` (the Kafka key),
``producer``, ``correlation_id`` and ``causation_id``. Events that change one memory
carry its ``memory_id`` and the ``revision`` the change produces; events that change
several carry ``affected``, a list of (memory_id, revision).

Projections apply a change to a memory only if its revision is newer than the one they
hold (invariant 2), except erasure, which always applies.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, model_validator

from contracts.base import Frozen
from contracts.memory import ClearProvenance, MemoryBody, SealedText
from contracts.screening import Screening
from contracts.types import Kind, MemoryId, MemoryStatus, NonEmptyStr, ScopeType, UtcDatetime

SCHEMA_VERSION = 1
"""The first schema version of every event type. Versions are per type: the current one
of each type is its model's ``schema_version`` default, collected in ``SCHEMA_VERSIONS``."""


class Envelope(Frozen):
    """Fields every event has. ``schema_version`` is the version of the event's own
    type (each type evolves on its own: a type's model sets its current version as the
    field's default); older versions are upcast on read (``contracts.upcasting``)."""

    event_id: NonEmptyStr
    schema_version: int = Field(default=SCHEMA_VERSION, ge=1, strict=True)
    occurred_at: UtcDatetime
    subject_id: NonEmptyStr
    producer: NonEmptyStr
    correlation_id: NonEmptyStr
    causation_id: NonEmptyStr | None = None


class MemoryRef(Frozen):
    """One memory touched by a multi-memory event, with the revision it reaches."""

    memory_id: MemoryId
    revision: int = Field(ge=1)


class MemoryWritten(Envelope):
    """A memory was recorded (revision 1). Its status is ``active``, or
    ``needs_confirmation`` for an unconfirmed inference.

    The ledger writes every inference unconfirmed: one that the subject had already
    confirmed is followed by its own ``MemoryConfirmed``. (A log written before that
    may hold an inference with ``memory.confirmed`` true, which enters ``active``.)

    Version 2 added ``memory.screening`` (version 1 events read as ``None``)."""

    schema_version: int = Field(default=2, ge=1)
    type: Literal["MemoryWritten"] = "MemoryWritten"
    memory_id: MemoryId
    revision: int = Field(default=1, ge=1)
    memory: MemoryBody


class SummaryDerived(Envelope):
    """A summary was derived from other memories (``memory.provenance.derived_from``).

    ``replaces`` names the summary this one regenerates, when a source of that summary
    was invalidated and the ledger summarised the sources that remain.

    Version 2 added ``memory.screening`` (version 1 events read as ``None``)."""

    schema_version: int = Field(default=2, ge=1)
    type: Literal["SummaryDerived"] = "SummaryDerived"
    memory_id: MemoryId
    revision: int = Field(default=1, ge=1)
    memory: MemoryBody
    replaces: MemoryId | None = None


class MemorySuperseded(Envelope):
    """A memory was replaced by a newer one (``superseded_by``)."""

    type: Literal["MemorySuperseded"] = "MemorySuperseded"
    memory_id: MemoryId
    revision: int = Field(ge=2)
    superseded_by: MemoryId


class MemoryConfirmed(Envelope):
    """The subject confirmed a memory; an inference becomes ``active``. ``causation_id``
    names the event it follows from, when there is one: the ``MemoryWritten`` of an
    inference written already confirmed, or the ``MemoryReinforced`` of a restatement
    that confirmed it (none for ``memledger confirm``)."""

    type: Literal["MemoryConfirmed"] = "MemoryConfirmed"
    memory_id: MemoryId
    revision: int = Field(ge=2)


class MemoryReinforced(Envelope):
    """The same statement was recorded again for a live memory: no new memory is made;
    the memory's ``confidence`` rises to the value given (see ``ledger.policy.reinforce``)
    and ``provenance`` records where the repetition came from (its references, when it
    has any, sealed in ``personal`` under the memory's current data key)."""

    type: Literal["MemoryReinforced"] = "MemoryReinforced"
    memory_id: MemoryId
    revision: int = Field(ge=2)
    confidence: float = Field(ge=0.0, le=1.0)
    provenance: ClearProvenance
    personal: SealedText | None = None


class ConflictDetected(Envelope):
    """Live memories with the same subject, purpose, scope and ``key`` make different
    claims from different sources. No claim wins by arriving last: every memory in
    ``affected`` (two or more) becomes ``needs_confirmation`` until the subject confirms
    one or states the value again.

    The slot's ``key`` and scope id are personal fields: the event does not repeat them
    (each member's sealed fields hold them); projections take them from the members."""

    type: Literal["ConflictDetected"] = "ConflictDetected"
    conflict_id: NonEmptyStr
    purpose: NonEmptyStr
    scope_type: ScopeType
    affected: tuple[MemoryRef, ...] = Field(min_length=2)


class RedactedState(Frozen):
    """What a projection needs to rebuild a memory from one event, without the events
    before it: the memory's state when the event was made (a redaction, whose original
    text's key is destroyed, or a reinstatement, after which a store that dropped the
    memory when it was superseded holds it again)."""

    status: MemoryStatus
    kind: Kind
    purpose: NonEmptyStr
    scope_type: ScopeType
    expires_at: UtcDatetime | None = None
    derived_from: tuple[NonEmptyStr, ...] = ()


class MemoryRedacted(Envelope):
    """Part of a memory's text was removed; ``content`` is the new, sealed text, under a
    new data key: the key of the text it replaces is destroyed, so no copy of that text
    in the log stays readable. ``personal`` holds the memory's personal fields sealed
    under the new key (the ones under the destroyed key are unreadable from now on).
    ``screening`` records what screening found in the new text (version 2 added it;
    version 1 events read as ``None``)."""

    schema_version: int = Field(default=2, ge=1)
    type: Literal["MemoryRedacted"] = "MemoryRedacted"
    memory_id: MemoryId
    revision: int = Field(ge=2)
    fields: tuple[NonEmptyStr, ...]
    content: SealedText
    content_hmac: NonEmptyStr | None = None
    state: RedactedState | None = None
    personal: SealedText | None = None
    screening: Screening | None = None


class MemoryReinstated(Envelope):
    """A memory is live again, awaiting confirmation, because an erasure removed the live
    memory that held its slot instead of it (``ledger.supersession``):

    - ``reason`` ``replacement_erased``: it had been superseded, and ``replacement``, the
      live memory that superseded it, directly or through versions erased before
      (``A <- B <- C``, ``B`` erased, then ``C``: ``A`` is reinstated, ``replacement`` is
      ``C``), was erased, so its slot would otherwise have no answer;
    - ``reason`` ``rival_erased``: it was in conflict (``ConflictDetected``) and
      ``rival``, the last other live claim of its slot, was erased: it is no longer
      disputed, but still unconfirmed.

    Its status becomes ``needs_confirmation``: it is recalled only with unconfirmed
    memories, and ``confirm`` makes it ``active``. ``causation_id`` is the event id of the
    ``ErasureRequested``. Exactly the one of ``replacement`` and ``rival`` that ``reason``
    names is given.

    ``content`` and ``personal`` are the memory's text and personal fields, sealed under
    its current data key, ``content_hmac`` the text's fingerprint, and ``state`` its state
    now, so that a store that dropped the memory when it was superseded (the vector
    index) can rebuild it from this event.

    Version 2 added the reason ``rival_erased`` and ``rival`` (``replacement`` is optional
    since; a version-1 event always has ``replacement_erased`` and its ``replacement``)."""

    schema_version: int = Field(default=2, ge=1)
    type: Literal["MemoryReinstated"] = "MemoryReinstated"
    memory_id: MemoryId
    revision: int = Field(ge=2)
    reason: Literal["replacement_erased", "rival_erased"] = "replacement_erased"
    replacement: MemoryId | None = None
    rival: MemoryId | None = None
    content: SealedText
    personal: SealedText
    state: RedactedState
    content_hmac: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _names_the_erased_memory(self) -> MemoryReinstated:
        named, other = ("replacement", "rival") if self.reason == "replacement_erased" else ("rival", "replacement")
        if getattr(self, named) is None:
            raise ValueError(f"{named}: reason {self.reason} names the erased memory in {named}")
        if getattr(self, other) is not None:
            raise ValueError(f"{other}: not given with reason {self.reason} (the erased memory is in {named})")
        return self


class ConsentRevoked(Envelope):
    """Consent was withdrawn; every memory in ``affected`` is now ``revoked``.

    ``consent_ref`` (the withdrawn consent's reference, when revoked by reference) is
    sealed under the subject's data key, destroyed when the whole subject is erased."""

    type: Literal["ConsentRevoked"] = "ConsentRevoked"
    consent_ref: SealedText | None = None
    purpose: NonEmptyStr | None = None
    affected: tuple[MemoryRef, ...]


class RetentionExpired(Envelope):
    """The memories in ``affected`` reached the end of their retention, and their data
    keys were destroyed before this event was appended.

    ``reason`` is ``expires_at`` (the memory's own expiry: status becomes ``expired``)
    or ``consent_grace`` (a revoked memory's grace period for keeping its content ended:
    status stays ``revoked``)."""

    type: Literal["RetentionExpired"] = "RetentionExpired"
    affected: tuple[MemoryRef, ...]
    reason: Literal["expires_at", "consent_grace"] = "expires_at"


class ErasureRequested(Envelope):
    """Erasure of the memories in ``affected`` was ordered. ``request_kind`` says how
    they were named: ``memories`` (by id), ``subject`` (all of the subject's) or
    ``source`` (every memory whose provenance names one turn, tool call or document).

    Their data keys are destroyed before this event is appended, so the log holds no
    readable copy from then on; projections remove every derived copy and write a
    receipt for ``request_id``.
    """

    type: Literal["ErasureRequested"] = "ErasureRequested"
    request_id: NonEmptyStr
    request_kind: Literal["memories", "subject", "source"]
    requested_by: NonEmptyStr
    reason: NonEmptyStr
    legal_basis: NonEmptyStr
    affected: tuple[MemoryRef, ...]


Event = Annotated[
    MemoryWritten
    | SummaryDerived
    | MemorySuperseded
    | MemoryConfirmed
    | MemoryReinforced
    | ConflictDetected
    | MemoryRedacted
    | MemoryReinstated
    | ConsentRevoked
    | RetentionExpired
    | ErasureRequested,
    Field(discriminator="type"),
]
"""Any event of the ledger."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
"""The one module-level adapter for (de)serialising events."""

EVENT_TYPES: tuple[type[Envelope], ...] = (
    MemoryWritten,
    SummaryDerived,
    MemorySuperseded,
    MemoryConfirmed,
    MemoryReinforced,
    ConflictDetected,
    MemoryRedacted,
    MemoryReinstated,
    ConsentRevoked,
    RetentionExpired,
    ErasureRequested,
)


def model_versions(models: tuple[type[Envelope], ...]) -> dict[str, int]:
    """``{type name: current schema_version}`` of event models (their field defaults)."""
    return {str(m.model_fields["type"].default): int(m.model_fields["schema_version"].default) for m in models}


SCHEMA_VERSIONS: dict[str, int] = model_versions(EVENT_TYPES)
"""The current schema version of each event type (``MemoryWritten``, ``SummaryDerived``
and ``MemoryRedacted`` are at 2: they record screening; ``MemoryReinstated`` at 2: it may
name an erased rival; the others at 1)."""


def touched_memories(event: Event) -> tuple[MemoryRef, ...]:
    """The (memory_id, revision) pairs an event changes, for any event type."""
    if isinstance(event, (ConsentRevoked, RetentionExpired, ErasureRequested, ConflictDetected)):
        return event.affected
    return (MemoryRef(memory_id=event.memory_id, revision=event.revision),)
