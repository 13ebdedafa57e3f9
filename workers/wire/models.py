"""The JSON bodies of the HTTP API (``/v1``): requests and responses. Importable with
pydantic alone, so that the client (``workers.client``) needs no server dependency.

Requests forbid unknown fields; a request never names its subject (the subject is the
URL's, checked against the credential) nor its writer (the authenticated principal).
Times are ISO 8601 with a zone, returned in UTC. Counts, positions, durations and flags of
a request are strict (``true`` is not 1, ``"5"`` is not 5, ``1`` and ``"yes"`` are not true:
``{"whole_subject": "yes"}`` must not erase a subject). Field constraints here are the wire's
own (types, sizes); the ledger's rules (retention per class, slots, consent) are checked
by the ledger and refused with the same words as the CLI.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

Kind = Literal["preference", "fact", "inference", "task_state", "summary"]
Sensitivity = Literal["public", "internal", "personal", "restricted"]
Basis = Literal["session", "consent", "contract", "indefinite"]
Veracity = Literal["stated", "inferred", "imported", "tool"]
KeyScope = Literal["read", "write", "erase", "admin"]
"""The scopes of an API key."""

ProjectionName = Literal["facts", "vectors", "cache", "summaries"]
READS: tuple[ProjectionName, ...] = ("facts", "vectors", "summaries")
"""The projections recall reads (the cache is re-checked against facts)."""

MAX_BATCH = 100
"""The most memories one batch write takes."""


def _utc_holds(moment: datetime) -> datetime:
    """``moment`` as given, once UTC can hold it: a time of year 1 ahead of UTC (or of
    year 9999 behind it) has no UTC time in Python's range (years 1 to 9999)."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("must be a time UTC can hold: between 0001-01-01 and 9999-12-31 in UTC") from None
    return moment


Time = Annotated[AwareDatetime, AfterValidator(_utc_holds)]
"""An aware time (ISO 8601 with a zone) that UTC can hold."""

Text = Field(min_length=1, max_length=65_536)
Ident = Field(min_length=1, max_length=512)


class Request(BaseModel):
    """Base of request bodies: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class Response(BaseModel):
    """Base of response bodies (unknown fields ignored, so an older client reads a newer server)."""

    model_config = ConfigDict(extra="ignore")


# -- requests ---------------------------------------------------------------------------


class WriteMemory(Request):
    """A new memory of the URL's subject. ``scope`` is ``subject``, ``document:ID`` or
    ``workspace:ID``; ``agent`` is the calling agent's own label, recorded beside the
    authenticated principal (the ``writer``). ``veracity`` defaults to ``inferred`` for an
    inference, else ``stated``. ``supersede_key``: the memory replaces the live memories
    of its slot (subject, purpose, scope, ``key``) whatever their source, and the same
    text again is a new memory, not a reinforcement (an explicit supersession by key, as
    a key-value store's put); it needs a ``key``."""

    content: str = Text
    purpose: str = Ident
    kind: Kind = "fact"
    scope: str = Field(default="subject", min_length=1, max_length=520)
    key: str | None = Field(default=None, min_length=1, max_length=512)
    sensitivity: Sensitivity = "internal"
    expires_at: Time | None = None
    basis: Basis = "indefinite"
    consent_ref: str | None = Field(default=None, min_length=1, max_length=512)
    turn_id: str | None = Field(default=None, min_length=1, max_length=512)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=512)
    source_ref: str | None = Field(default=None, min_length=1, max_length=512)
    derived_from: list[str] = Field(default_factory=list, max_length=1000)
    confirmed: bool = Field(default=False, strict=True)
    confidence: float | None = None  # the ledger checks it: a finite number in [0, 1]
    veracity: Veracity | None = None
    agent: str | None = Field(default=None, min_length=1, max_length=512)
    supersede_key: bool = Field(default=False, strict=True)


class WriteBatch(Request):
    """Several memories of one subject, written in one transaction (all or none)."""

    memories: list[WriteMemory] = Field(min_length=1, max_length=MAX_BATCH)


class Supersede(Request):
    """Replace a memory with a new one holding ``content``. Fields left out are taken from
    the memory replaced (purpose and scope cannot change), except where the replacement
    came from (turn, tool call, source, ``veracity``: a new statement unless given).
    ``confirmed`` defaults to whether the old memory was active."""

    content: str = Text
    kind: Kind | None = None
    key: str | None = Field(default=None, min_length=1, max_length=512)
    sensitivity: Sensitivity | None = None
    expires_at: Time | None = None
    basis: Basis | None = None
    consent_ref: str | None = Field(default=None, min_length=1, max_length=512)
    turn_id: str | None = Field(default=None, min_length=1, max_length=512)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=512)
    source_ref: str | None = Field(default=None, min_length=1, max_length=512)
    derived_from: list[str] | None = Field(default=None, max_length=1000)
    confirmed: bool | None = Field(default=None, strict=True)
    veracity: Veracity | None = None
    agent: str | None = Field(default=None, min_length=1, max_length=512)


class Redact(Request):
    """Replace a memory's text with ``replacement`` (the redacted text)."""

    replacement: str = Field(max_length=65_536)
    fields: list[str] = Field(default_factory=lambda: ["content"], min_length=1, max_length=16)


class RevokeConsent(Request):
    """Withdraw consent by ``consent_ref`` or ``purpose`` (or both). Permanent; one that
    matches nothing is refused unless ``allow_unmatched``."""

    consent_ref: str | None = Field(default=None, min_length=1, max_length=512)
    purpose: str | None = Field(default=None, min_length=1, max_length=512)
    allow_unmatched: bool = Field(default=False, strict=True)


class Erase(Request):
    """Erase memories of the URL's subject, and everything derived from them: exactly one
    of ``memory_ids``, ``whole_subject`` or ``source`` (a turn id, tool call id or
    source reference their provenance names). ``with_history``: also every earlier
    version: those they superseded, directly or through a chain, and the memories of their
    key recorded before them, no longer live, that still hold content
    (``ledger.supersession``)."""

    memory_ids: list[str] = Field(default_factory=list, max_length=1000)
    whole_subject: bool = Field(default=False, strict=True)
    source: str | None = Field(default=None, min_length=1, max_length=512)
    reason: str = Field(default="erasure requested by the subject", min_length=1, max_length=512)
    legal_basis: str = Field(default="gdpr-art-17", min_length=1, max_length=512)
    with_history: bool = Field(default=False, strict=True)


class LogPosition(BaseModel):
    """A place in the event log: ``partition`` and ``offset`` (0-based)."""

    model_config = ConfigDict(extra="forbid")
    partition: int = Field(ge=0, le=100_000, strict=True)
    offset: int = Field(ge=0, le=2**62, strict=True)


class Recall(Request):
    """Recall for a task. ``scope``: the task's scopes beyond the subject's own
    (``document:ID``, ``workspace:ID``); ``now``: the time recall judges expiry at
    (default: the server's UTC now); ``as_of``: recall what was known at that past time
    (aware, not after ``now``); ``max_tokens``: the best items whose texts fit in that many
    of the embedder's tokens. ``wait_for``: positions (a write's) the read projections
    must have applied first, within ``wait_timeout_s`` seconds."""

    query: str = Field(min_length=1, max_length=4096)
    purpose: str = Ident
    k: int = Field(default=10, ge=1, le=1000, strict=True)
    now: Time | None = None
    scope: list[str] = Field(default_factory=list, max_length=64)
    include_unconfirmed: bool = Field(default=False, strict=True)
    as_of: Time | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    wait_for: list[LogPosition] = Field(default_factory=list, max_length=1000)
    wait_timeout_s: float = Field(default=5.0, ge=0.0, le=60.0, strict=True)


class Wait(Request):
    """Wait until the projections named (default: every one a read uses) have applied
    ``positions``, at most ``timeout_s`` seconds."""

    positions: list[LogPosition] = Field(min_length=1, max_length=1000)
    projections: list[ProjectionName] = Field(default_factory=lambda: list(READS), min_length=1, max_length=4)
    timeout_s: float = Field(default=5.0, ge=0.0, le=60.0, strict=True)


# -- responses --------------------------------------------------------------------------


class EventRef(Response):
    """An event an accepted command appended: its id (UUIDv7) and type."""

    event_id: str
    type: str


class ScreeningFindingOut(Response):
    """One kind of secret or personal data screening found in a memory's text: ``kind``
    (``aws_access_key``, ``email_address``, ...), ``category`` (``secret``,
    ``personal``), ``action`` (``replaced``, ``raised``, ``kept``) and ``count``. Never
    the value."""

    kind: str
    category: str
    action: str
    count: int


class ScreeningOut(Response):
    """What screening decided for the text a command recorded: the ``policy`` that
    decided, its ``findings``, and ``raised_from``, the class the request gave when
    screening raised it."""

    policy: str
    findings: list[ScreeningFindingOut] = Field(default_factory=list)
    raised_from: str | None = None


class CommandAck(Response):
    """An accepted command: its events, where the log put them (their order), and what it
    ended in (``memory_id`` of a write, ``request_id`` of an erasure, the memories a
    revocation or erasure reached in ``affected``). The log has every event listed, unless
    ``pending``: the command is recorded (its state changed, its events wait in the
    ledger's outbox) but the log's acknowledgement was lost; the relay publishes the
    events, ``positions`` is empty, and the command must not be sent again.

    ``repeat``: why the command changed nothing (no events): a retried write (same turn
    or tool call id and same fields; ``memory_id`` and ``first_event_ids`` are its first
    attempt's), a confirmation of a confirmed memory, a withdrawal already made.
    ``screening``: what screening decided for the text written or redacted. An erasure's
    ``reinstated`` are the earlier versions made ``needs_confirmation`` again because
    their replacement was erased, ``earlier_versions`` those still holding content,
    ``rivals_reinstated`` the claims reinstated (``needs_confirmation``) because the
    erasure removed the last other live claim of their slot, a rival in conflict."""

    memory_id: str | None = None
    request_id: str | None = None
    affected: list[str] = Field(default_factory=list)
    events: list[EventRef]
    positions: list[LogPosition]
    pending: bool = False
    repeat: str | None = None
    first_event_ids: list[str] = Field(default_factory=list)
    screening: ScreeningOut | None = None
    reinstated: list[str] = Field(default_factory=list)
    earlier_versions: list[str] = Field(default_factory=list)
    rivals_reinstated: list[str] = Field(default_factory=list)


class BatchAck(Response):
    """One ``CommandAck`` per memory of a batch, in the batch's order; or, when
    ``pending`` (the batch is recorded but the log's acknowledgement was lost, as for
    ``CommandAck.pending``), no results and the batch's events in ``pending_events``."""

    results: list[CommandAck]
    pending: bool = False
    pending_events: list[EventRef] = Field(default_factory=list)


class RecalledItem(Response):
    """One recalled memory with its provenance; ``grouped`` holds a summary's sources
    recalled with it (not listed again at top level); ``tokens``: the length of its text
    in the embedder's tokens."""

    memory_id: str
    subject_id: str
    kind: str
    content: str
    score: float
    status: str
    confirmed: bool
    confidence: float
    key: str | None
    purpose: str
    scope: dict[str, str]
    provenance: dict[str, Any]
    revision: int
    expires_at: str | None
    sensitivity: str
    needs_confirmation: bool
    tokens: int = 0
    matched_by: list[str] = Field(default_factory=list)
    derived_from: list[str] = Field(default_factory=list)
    grouped: list[RecalledItem] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)


class RecallResult(Response):
    """Recalled items, best first; ``cached``: from the recall cache; ``degraded``: the
    rankers left out because their store was unreachable; ``tokens``: the items' total
    length in the embedder's tokens; ``as_of``: the past time judged (ISO 8601), if any."""

    cached: bool
    degraded: list[str]
    items: list[RecalledItem]
    tokens: int = 0
    as_of: str | None = None


class MemoryOut(Response):
    """A memory with its status. ``content``, ``key``, the scope id and the provenance
    references (the fields the ledger seals) only for a caller with a read grant;
    ``erased_by``/``erased_at`` for an erased one. ``first_written_at``: when the oldest
    memory of the subject that still holds this one's key in its purpose and scope was
    written (superseded ones count; erased, revoked and expired ones hold no key): since
    when the key has had a value."""

    memory_id: str
    subject_id: str
    status: str
    revision: int | None = None
    kind: str | None = None
    key: str | None = None
    purpose: str | None = None
    scope: dict[str, str | None] = Field(default_factory=dict)
    sensitivity: str | None = None
    confirmed: bool | None = None
    confidence: float | None = None
    written_at: datetime | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    first_written_at: datetime | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)
    superseded_by: str | None = None
    supersedes: list[str] = Field(default_factory=list)
    content: str | None = None
    erased_by: str | None = None
    erased_at: datetime | None = None


class MemoryPage(Response):
    """A page of a subject's memories; pass ``next_after`` as ``after`` for the next one."""

    memories: list[MemoryOut]
    next_after: str | None = None


class HistoryEntry(Response):
    """One revision of a memory: event, status after it, log position. No content."""

    revision: int
    event_type: str
    event_id: str
    status: str | None
    producer: str
    occurred_at: datetime
    log_partition: int
    log_offset: int


class MemoryDetail(Response):
    """One memory and its content-free history."""

    memory: MemoryOut
    history: list[HistoryEntry]


class ConflictMemberOut(Response):
    memory_id: str
    status: str
    content: str | None
    veracity: str | None
    source: dict[str, str]
    written_at: str | None


class ConflictOut(Response):
    """Memories that claim different values for one key; ``open`` while two are live."""

    conflict_id: str
    key: str | None
    purpose: str
    scope: dict[str, str | None]
    detected_at: str
    open: bool
    merged_into: str | None
    members: list[ConflictMemberOut]


class StoreTraceOut(Response):
    """One store's part of an erasure trace (see ``memledger trace``)."""

    store: str
    status: str
    applied_at: str | None = None
    log_partition: int | None = None
    log_offset: int | None = None
    items_removed: int | None = None
    latency_s: float | None = None
    probe_found: int | None = None
    probe: str = ""
    fingerprint_found: int | None = None
    fingerprint_probe: str = "-"
    projection: str | None = None
    rebuilt: bool = False
    removed_by: str | None = None
    removed_at: str | None = None


class EarlierVersionOut(Response):
    """An earlier version of an erased memory that the request did not erase: its status
    now, whether it still holds content, and whether the request reinstated it."""

    memory_id: str
    status: str
    holds_content: bool
    reinstated: bool


class ReinstatedRivalOut(Response):
    """A claim the request reinstated because it erased its last rival in a conflict:
    its status now and whether it still holds content."""

    memory_id: str
    status: str
    holds_content: bool


class TraceOut(Response):
    """Where an erasure request was applied, store by store, with live probes, and the
    verdict (``complete``, ``pending``, ``failed``). ``with_history``: the request erased
    the earlier versions too; ``earlier_versions``: those it left; ``rivals_reinstated``:
    the claims it reinstated because it erased their last rival; ``disk``: residue on
    disk (``applied``: compacted at ``applied_at``; ``reported``: until ``memledger
    compact``), reported beside the stores, not judged by the verdict."""

    request_id: str
    subject_id: str
    request_kind: str
    memory_ids: list[str]
    requested_at: str
    requested_by: str
    reason: str
    legal_basis: str
    log_partition: int | None
    log_offset: int | None
    stores: list[StoreTraceOut]
    verdict: str
    source_ref: str | None = None
    fingerprints: int = 0
    with_history: bool = False
    earlier_versions: list[EarlierVersionOut] = Field(default_factory=list)
    rivals_reinstated: list[ReinstatedRivalOut] = Field(default_factory=list)
    disk: StoreTraceOut | None = None


class ErasureSummaryOut(Response):
    request_id: str
    subject_id: str
    request_kind: str
    requested_at: str
    requested_by: str
    legal_basis: str
    memories: int
    verdict: str
    pending_stores: list[str]
    failed_stores: list[str]


class ErasureReportOut(Response):
    """Erasure requests in ``[since, until)`` with their verdicts; ``withheld`` counts
    requests of subjects the caller may not erase (left out)."""

    since: str
    until: str | None
    totals: dict[str, int]
    withheld: int
    requests: list[ErasureSummaryOut]


class StalledPartition(Response):
    """A partition where a projection version stopped, at ``offset``, on an erasure it
    cannot read (``since``: UTC); it goes on once a reader that can read it runs."""

    projection: str
    partition: int
    offset: int
    reason: str
    since: datetime


class ProjectionLag(Response):
    """Records a projection version has not applied: in all and per partition, the
    writes it applied whose vectors are still being computed (vectors only), and the
    partitions where it stopped."""

    projection: str
    state: str
    lag: int
    per_partition: dict[int, int]
    queued_for_embedding: int = 0
    stalled: list[StalledPartition] = Field(default_factory=list)


class OutboxBacklog(Response):
    """What commands recorded and the log has not acknowledged yet (distributed mode):
    ``records`` of ``subjects`` subjects, the oldest committed at ``oldest_at`` (UTC),
    ``oldest_age_s`` seconds ago; zeros and nulls when empty."""

    records: int = 0
    subjects: int = 0
    oldest_at: datetime | None = None
    oldest_age_s: float | None = None


class LagOut(Response):
    end_offsets: dict[int, int]
    projections: list[ProjectionLag]
    outbox: OutboxBacklog = Field(default_factory=OutboxBacklog)


class EmbedderOut(Response):
    name: str
    dim: int
    model: str


class VersionOut(Response):
    """One projection version of the registry."""

    name: str
    version: int
    id: str
    state: str
    embedder: EmbedderOut | None
    created_at: str
    swapped_at: str | None
    retired_at: str | None


class AuditEntry(Response):
    """One audited attempt: when (UTC), who (``principal``, ``key_id``; ``None`` without
    a valid credential), which subject, through which route or tool, the ``outcome``
    (``refused``, ``ok``) and why. Never memory content."""

    id: int
    at: datetime
    principal: str | None
    key_id: str | None
    subject_id: str | None
    route: str
    outcome: str
    reason: str


class AuditPage(Response):
    """Audit entries, newest first; pass ``next_before`` as ``before`` for older ones."""

    entries: list[AuditEntry]
    next_before: int | None = None


class WaitResult(Response):
    """The positions were applied by every projection named, after ``waited_ms``."""

    applied: bool
    waited_ms: float


class Health(Response):
    status: Literal["ok"]


class StoreCheck(Response):
    store: str
    ok: bool
    detail: str


class Ready(Response):
    """Whether every store answered (``ready``), store by store; and ``grants_file``, why
    the grants file as it is now is not in force (``None``: it is), while the grants read
    before stay in force (it does not make the process unready)."""

    ready: bool
    mode: Literal["embedded", "distributed"]
    stores: list[StoreCheck]
    grants_file: str | None = None


class Problem(Response):
    """An error (RFC 9457 problem details). ``field`` and ``rule`` name the input and the
    rule it broke, with the words the CLI uses (``error: <field>: <rule>``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    rule: str | None = None
    retry_after_s: float | None = None
