"""Contracts: valid commands and events (hypothesis), the JSON round trip, UTC
normalisation, the rejections (each naming its field), ``decode_event`` errors,
immutability, and the checked-in JSON Schema."""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AwareDatetime, BaseModel, TypeAdapter, ValidationError

from contracts import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    ClearProvenance,
    ConflictDetected,
    ConsentRevoked,
    EraseMemories,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemoryReinstated,
    MemorySuperseded,
    MemoryWrite,
    MemoryWritten,
    Provenance,
    RedactedState,
    Retention,
    RetentionExpired,
    Scope,
    Screening,
    ScreeningFinding,
    SealedText,
    SummaryDerived,
    UnknownEventError,
    decode_event,
    describe_validation_error,
    encode_event,
)
from contracts.schema import SCHEMA_PATH, current_schema, render_schema
from contracts.types import iso_utc, text_problem

# --------------------------------------------------------------------------- strategies

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@ éü中"
_CONTROL = "".join(chr(i) for i in range(0x20)) + "\x7f"
"""The characters identifiers refuse: C0 controls and DEL."""
_CONTROL_BUT_TAB_NL_CR = _CONTROL.translate({ord("\t"): None, ord("\n"): None, ord("\r"): None})
"""The characters content refuses."""

ids = st.text(alphabet=_ID_ALPHABET, min_size=1, max_size=24).filter(lambda s: s.strip() != "")
"""Identifier-like strings (``NonEmptyStr``); may hold inner spaces and non-ASCII letters,
never control characters, at most 72 UTF-8 bytes."""

memory_ids = st.uuids().map(str)
"""Memory ids of events (``MemoryId``): UUIDs in canonical lowercase text form."""

contents = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters=_CONTROL_BUT_TAB_NL_CR),
    min_size=1,
    max_size=200,
).filter(lambda s: s.strip() != "")
"""Memory text (``Content``): any text but surrogates and control characters other than
tab, newline and carriage return, with at least one character that is not white space."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


nonces = st.binary(min_size=12, max_size=12).map(_b64)
"""AES-GCM nonces: 12 bytes, URL-safe base64."""
ciphertexts = st.binary(min_size=16, max_size=48).map(_b64)
"""AES-GCM ciphertexts: at least the 16-byte tag, URL-safe base64."""

MID = str(uuid.UUID(int=1))
"""A valid memory id for the literal events below."""
NONCE = _b64(bytes(range(12)))
CIPHERTEXT = _b64(bytes(range(16, 40)))
SEALED = {"key_id": MID, "nonce": NONCE, "ciphertext": CIPHERTEXT}
"""A well-formed ``SealedText`` (12-byte nonce, 24-byte ciphertext) as JSON."""
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
"""Fixed UTC offsets from -14:00 to +14:00, UTC included."""

aware_datetimes = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=offsets)
"""Timezone-aware datetimes in arbitrary zones (normalised to UTC by the models)."""

KINDS = ("preference", "fact", "inference", "task_state", "summary")
SENSITIVITIES = ("public", "internal", "personal", "restricted")
RETENTION_BASES = ("session", "consent", "contract", "indefinite")
VERACITIES = ("stated", "inferred", "imported", "tool")
SCOPE_TYPES = ("document", "workspace", "subject")

confidences = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def provenances(draw: st.DrawFn, needs_sources: bool = False) -> Provenance:
    return Provenance(
        writer=draw(ids),
        written_at=draw(aware_datetimes),
        turn_id=draw(st.none() | ids),
        tool_call_id=draw(st.none() | ids),
        consent_ref=draw(st.none() | ids),
        source_ref=draw(st.none() | ids),
        derived_from=tuple(draw(st.lists(ids, min_size=1 if needs_sources else 0, max_size=3))),
    )


@st.composite
def clear_provenances(draw: st.DrawFn, needs_sources: bool = False) -> ClearProvenance:
    return ClearProvenance(
        writer=draw(ids),
        written_at=draw(aware_datetimes),
        derived_from=tuple(draw(st.lists(ids, min_size=1 if needs_sources else 0, max_size=3))),
    )


retentions = st.builds(Retention, basis=st.sampled_from(RETENTION_BASES), expires_at=st.none() | aware_datetimes)
sealed_texts = st.builds(SealedText, key_id=memory_ids, nonce=nonces, ciphertext=ciphertexts)
findings = st.builds(
    ScreeningFinding,
    kind=ids,
    category=st.sampled_from(("secret", "personal")),
    action=st.sampled_from(("replaced", "raised", "kept")),
    count=st.integers(min_value=1, max_value=50),
)
screenings = st.none() | st.builds(
    Screening,
    policy=ids,
    findings=st.lists(findings, max_size=3).map(tuple),
    raised_from=st.none() | st.sampled_from(SENSITIVITIES),
)
"""Screening decisions as events record them (``None``: not screened)."""


@st.composite
def scopes_for(draw: st.DrawFn, subject_id: str) -> Scope:
    scope_type = draw(st.sampled_from(SCOPE_TYPES))
    return Scope(type=scope_type, id=subject_id if scope_type == "subject" else draw(ids))


@st.composite
def memory_writes(draw: st.DrawFn) -> MemoryWrite:
    """Valid ``MemoryWrite`` commands: inferences and summaries name their sources and a
    subject scope names the command's own subject."""
    subject_id = draw(ids).strip()
    kind = draw(st.sampled_from(KINDS))
    return MemoryWrite(
        subject_id=subject_id,
        kind=kind,
        content=draw(contents),
        purpose=draw(ids),
        scope=draw(scopes_for(subject_id)),
        provenance=draw(provenances(needs_sources=kind in ("inference", "summary"))),
        key=draw(st.none() | ids),
        sensitivity=draw(st.sampled_from(SENSITIVITIES)),
        retention=draw(retentions),
        confirmed=draw(st.booleans()),
        confidence=draw(st.none() | confidences),
        veracity=draw(st.sampled_from(VERACITIES)),
    )


@st.composite
def memory_bodies(draw: st.DrawFn, kind: str | None = None) -> MemoryBody:
    kind = kind or draw(st.sampled_from(KINDS))
    return MemoryBody(
        kind=kind,
        content=draw(sealed_texts),
        personal=draw(sealed_texts),
        purpose=draw(ids),
        scope_type=draw(st.sampled_from(SCOPE_TYPES)),
        provenance=draw(clear_provenances(needs_sources=kind == "summary")),
        sensitivity=draw(st.sampled_from(SENSITIVITIES)),
        retention=draw(retentions),
        confirmed=draw(st.booleans()),
        confidence=draw(confidences),
        veracity=draw(st.sampled_from(VERACITIES)),
        content_hmac=draw(st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
        screening=draw(screenings),
    )


memory_refs = st.builds(MemoryRef, memory_id=memory_ids, revision=st.integers(min_value=1, max_value=10_000))
affected = st.lists(memory_refs, max_size=4).map(tuple)


def _envelope() -> dict[str, Any]:
    return {
        "event_id": ids,
        "occurred_at": aware_datetimes,
        "subject_id": ids,
        "producer": ids,
        "correlation_id": ids,
        "causation_id": st.none() | ids,
    }


later_revisions = st.integers(min_value=2, max_value=10_000)

EVENT_STRATEGIES: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    MemoryWritten: st.builds(MemoryWritten, memory_id=memory_ids, memory=memory_bodies(), **_envelope()),
    SummaryDerived: st.builds(
        SummaryDerived,
        memory_id=memory_ids,
        memory=memory_bodies(kind="summary"),
        replaces=st.none() | memory_ids,
        **_envelope(),
    ),
    MemorySuperseded: st.builds(
        MemorySuperseded, memory_id=memory_ids, revision=later_revisions, superseded_by=memory_ids, **_envelope()
    ),
    MemoryConfirmed: st.builds(MemoryConfirmed, memory_id=memory_ids, revision=later_revisions, **_envelope()),
    MemoryRedacted: st.builds(
        MemoryRedacted,
        memory_id=memory_ids,
        revision=later_revisions,
        fields=st.lists(ids, max_size=3).map(tuple),
        content=sealed_texts,
        content_hmac=st.none() | ids,
        personal=st.none() | sealed_texts,
        screening=screenings,
        **_envelope(),
    ),
    MemoryReinstated: st.builds(
        lambda erased, **fields: MemoryReinstated(**erased, **fields),
        memory_id=memory_ids,
        revision=later_revisions,
        erased=st.one_of(
            memory_ids.map(lambda m: {"reason": "replacement_erased", "replacement": m}),
            memory_ids.map(lambda m: {"reason": "rival_erased", "rival": m}),
        ),
        content=sealed_texts,
        personal=sealed_texts,
        content_hmac=st.none() | ids,
        state=st.builds(
            RedactedState,
            status=st.just("needs_confirmation"),
            kind=st.sampled_from(KINDS),
            purpose=ids,
            scope_type=st.sampled_from(SCOPE_TYPES),
            expires_at=st.none() | aware_datetimes,
            derived_from=st.lists(ids, max_size=3).map(tuple),
        ),
        **_envelope(),
    ),
    ConsentRevoked: st.builds(
        ConsentRevoked, consent_ref=st.none() | sealed_texts, purpose=st.none() | ids, affected=affected, **_envelope()
    ),
    MemoryReinforced: st.builds(
        MemoryReinforced,
        memory_id=memory_ids,
        revision=later_revisions,
        confidence=confidences,
        provenance=clear_provenances(),
        personal=st.none() | sealed_texts,
        **_envelope(),
    ),
    ConflictDetected: st.builds(
        ConflictDetected,
        conflict_id=ids,
        purpose=ids,
        scope_type=st.sampled_from(SCOPE_TYPES),
        affected=st.lists(memory_refs, min_size=2, max_size=4).map(tuple),
        **_envelope(),
    ),
    RetentionExpired: st.builds(
        RetentionExpired,
        affected=affected,
        reason=st.sampled_from(("expires_at", "consent_grace")),
        **_envelope(),
    ),
    ErasureRequested: st.builds(
        ErasureRequested,
        request_id=ids,
        request_kind=st.sampled_from(("memories", "subject", "source")),
        requested_by=ids,
        reason=ids,
        legal_basis=ids,
        affected=affected,
        **_envelope(),
    ),
}
events = st.one_of(*EVENT_STRATEGIES.values())


def _datetimes_in(value: object) -> Iterator[datetime]:
    """Every datetime held by a model (recursively)."""
    if isinstance(value, datetime):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _datetimes_in(getattr(value, name))
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _datetimes_in(item)


def _assert_utc(moment: datetime) -> None:
    assert moment.tzinfo is not None, f"{moment!r} is naive"
    assert moment.utcoffset() == timedelta(0), f"{moment!r} is not in UTC"
    assert moment.tzinfo == UTC


# --------------------------------------------------------------------------- valid values


def test_every_event_type_has_a_strategy() -> None:
    assert set(EVENT_STRATEGIES) == set(EVENT_TYPES)


@settings(deadline=None)
@given(memory_writes())
def test_memory_write_strategy_builds_valid_commands(command: MemoryWrite) -> None:
    if command.kind in ("inference", "summary"):
        assert command.provenance.derived_from
    if command.scope.type == "subject":
        assert command.scope.id == command.subject_id
    for moment in _datetimes_in(command):
        _assert_utc(moment)
    assert MemoryWrite.model_validate_json(command.model_dump_json()) == command


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_of_every_event_type(event_type: type[BaseModel], data: st.DataObject) -> None:
    event = data.draw(EVENT_STRATEGIES[event_type])
    assert isinstance(event, event_type)
    encoded = encode_event(event)
    assert isinstance(encoded, bytes)
    decoded = decode_event(encoded)
    assert type(decoded) is event_type
    assert decoded == event
    assert encode_event(decoded) == encoded
    for moment in _datetimes_in(decoded):
        _assert_utc(moment)


@settings(deadline=None)
@given(event=events)
def test_encoded_event_is_a_compact_json_object_with_type_and_version(event: Event) -> None:
    raw = json.loads(encode_event(event))
    assert isinstance(raw, dict)
    assert raw["type"] == type(event).__name__
    assert raw["schema_version"] == SCHEMA_VERSIONS[raw["type"]] >= SCHEMA_VERSION
    assert raw["subject_id"] == event.subject_id


def _shift_datetimes(raw: object, zone: timezone) -> object:
    """``raw`` (a JSON value) with every timestamp rewritten as the same instant in ``zone``."""
    if isinstance(raw, dict):
        out: dict[str, object] = {}
        for key, value in raw.items():
            if key in ("occurred_at", "written_at", "expires_at") and isinstance(value, str):
                out[key] = datetime.fromisoformat(value).astimezone(zone).isoformat()
            else:
                out[key] = _shift_datetimes(value, zone)
        return out
    if isinstance(raw, list):
        return [_shift_datetimes(v, zone) for v in raw]
    return raw


@settings(deadline=None)
@given(event=events, zone=offsets)
def test_decode_gives_utc_for_timestamps_written_in_other_zones(event: Event, zone: timezone) -> None:
    shifted = _shift_datetimes(json.loads(encode_event(event)), zone)
    decoded = decode_event(json.dumps(shifted).encode("utf-8"))
    assert decoded == event
    moments = list(_datetimes_in(decoded))
    assert moments, "every event has at least occurred_at"
    for moment in moments:
        _assert_utc(moment)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00+02:00", datetime(2024, 5, 1, 10, 0, tzinfo=UTC)),
        ("2024-05-01T12:00:00-08:00", datetime(2024, 5, 1, 20, 0, tzinfo=UTC)),
        ("2024-12-31T23:30:00-01:00", datetime(2025, 1, 1, 0, 30, tzinfo=UTC)),
        ("2024-05-01T12:00:00.123456+05:45", datetime(2024, 5, 1, 6, 15, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, 0, tzinfo=UTC)),
    ],
)
def test_decode_converts_each_timestamp_field_to_utc(text: str, expected: datetime) -> None:
    raw = {
        "type": "MemoryWritten",
        "event_id": "e-1",
        "occurred_at": text,
        "subject_id": "user-1",
        "producer": "test",
        "correlation_id": "c-1",
        "memory_id": MID,
        "memory": {
            "kind": "fact",
            "content": SEALED,
            "personal": SEALED,
            "purpose": "support",
            "scope_type": "subject",
            "provenance": {"writer": "agent", "written_at": text},
            "retention": {"basis": "consent", "expires_at": text},
            "confidence": 1.0,
        },
    }
    event = decode_event(json.dumps(raw).encode())
    assert isinstance(event, MemoryWritten)
    for moment in (event.occurred_at, event.memory.provenance.written_at, event.memory.retention.expires_at):
        assert moment is not None
        assert moment == expected
        _assert_utc(moment)
        assert (moment.hour, moment.minute, moment.microsecond) == (
            expected.hour,
            expected.minute,
            expected.microsecond,
        )


# --------------------------------------------------------------------------- rejections

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NAIVE = datetime(2024, 5, 1, 12, 0)


def _write(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "subject_id": "user-1",
        "kind": "fact",
        "content": "likes green tea",
        "purpose": "support",
        "scope": {"type": "subject", "id": "user-1"},
        "provenance": {"writer": "agent-1", "written_at": NOW},
    }
    base.update(overrides)
    return base


def _event(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": "e-1",
        "occurred_at": NOW,
        "subject_id": "user-1",
        "producer": "test",
        "correlation_id": "c-1",
        "memory_id": MID,
        "revision": 2,
    }
    base.update(overrides)
    return base


def _assert_names_field(exc: ValidationError, field: str) -> None:
    """The error points at ``field``: by its location, or (for a rule checked across
    fields) by a message that starts with ``field:``."""
    named = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in error["loc"])
        named.append(loc or error["msg"])
        if loc == field or (not loc and f"{field}:" in error["msg"]):
            return
    pytest.fail(f"the error does not name {field!r}; it names {named}")


def test_valid_baseline_command_is_accepted() -> None:
    """The rejections below change one thing each from this valid command."""
    command = MemoryWrite(**_write())
    assert command.subject_id == "user-1"
    assert MemoryConfirmed(**_event()).revision == 2


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"provenance": {"writer": "agent-1", "written_at": NAIVE}}, "provenance.written_at"),
        ({"retention": {"basis": "consent", "expires_at": NAIVE}}, "retention.expires_at"),
    ],
    ids=["provenance.written_at", "retention.expires_at"],
)
def test_naive_datetime_in_a_command_is_rejected(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(**overrides))
    _assert_names_field(info.value, field)
    assert any(e["type"] == "timezone_aware" for e in info.value.errors())


def test_naive_occurred_at_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(occurred_at=NAIVE))
    _assert_names_field(info.value, "occurred_at")


def test_naive_occurred_at_in_log_bytes_is_an_unknown_event() -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["occurred_at"] = "2024-05-01T12:00:00"
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "occurred_at" in info.value.reason
    assert "timezone" in info.value.reason


def test_naive_written_at_in_an_event_body_is_rejected() -> None:
    body = {
        "kind": "fact",
        "content": SEALED,
        "personal": SEALED,
        "purpose": "support",
        "scope_type": "workspace",
        "provenance": {"writer": "agent", "written_at": NAIVE},
        "confidence": 0.5,
    }
    with pytest.raises(ValidationError) as info:
        MemoryBody(**body)
    _assert_names_field(info.value, "provenance.written_at")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"colour": "blue"}, "colour"),
        ({"provenance": {"writer": "agent-1", "written_at": NOW, "signature": "x"}}, "provenance.signature"),
        ({"scope": {"type": "subject", "id": "user-1", "owner": "x"}}, "scope.owner"),
        ({"retention": {"basis": "consent", "until": "forever"}}, "retention.until"),
    ],
    ids=["top-level", "provenance", "scope", "retention"],
)
def test_unknown_field_is_rejected(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(**overrides))
    _assert_names_field(info.value, field)
    assert any(e["type"] == "extra_forbidden" for e in info.value.errors())


def test_unknown_field_in_an_event_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(note="hello"))
    _assert_names_field(info.value, "note")


@pytest.mark.parametrize("subject_id", ["", " ", "   \t\n "], ids=["empty", "space", "whitespace"])
def test_empty_or_blank_subject_id_is_rejected(subject_id: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(subject_id=subject_id, scope={"type": "workspace", "id": "w-1"}))
    _assert_names_field(info.value, "subject_id")
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(subject_id=subject_id))
    _assert_names_field(info.value, "subject_id")


def test_missing_provenance_writer_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(provenance={"written_at": NOW}))
    _assert_names_field(info.value, "provenance.writer")
    assert any(e["type"] == "missing" for e in info.value.errors())


@pytest.mark.parametrize("confidence", [-0.01, -1.0, 1.0001, 2.0], ids=["-0.01", "-1", "1.0001", "2"])
def test_confidence_outside_unit_interval_is_rejected(confidence: float) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(confidence=confidence))
    _assert_names_field(info.value, "confidence")


@pytest.mark.parametrize("confidence", [math.nan, math.inf, -math.inf, "nan", 1.5], ids=str)
def test_confidence_must_be_a_finite_number_between_0_and_1(confidence: float | str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(confidence=confidence))
    _assert_names_field(info.value, "confidence")
    assert "must be a finite number between 0 and 1" in describe_validation_error(info.value)


@pytest.mark.parametrize("confidence", [0.0, 0.5, 1.0])
def test_confidence_bounds_are_inclusive(confidence: float) -> None:
    assert MemoryWrite(**_write(confidence=confidence)).confidence == confidence


@pytest.mark.parametrize("kind", ["summary", "inference"])
def test_derived_kind_without_derived_from_is_rejected(kind: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(kind=kind))
    _assert_names_field(info.value, "provenance.derived_from")
    provenance = {"writer": "agent-1", "written_at": NOW, "derived_from": ["m-1"]}
    assert MemoryWrite(**_write(kind=kind, provenance=provenance)).provenance.derived_from == ("m-1",)


def test_summary_body_without_derived_from_is_rejected() -> None:
    body = {
        "kind": "summary",
        "content": SEALED,
        "personal": SEALED,
        "purpose": "support",
        "scope_type": "workspace",
        "provenance": {"writer": "summariser", "written_at": NOW},
        "confidence": 0.7,
    }
    with pytest.raises(ValidationError) as info:
        MemoryBody(**body)
    _assert_names_field(info.value, "provenance.derived_from")


def test_subject_scope_naming_another_subject_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(scope={"type": "subject", "id": "user-2"}))
    _assert_names_field(info.value, "scope.id")
    # Any other scope type may name any id.
    assert MemoryWrite(**_write(scope={"type": "workspace", "id": "user-2"})).scope.id == "user-2"


# --------------------------------------------------------------------------- memory ids

NOT_UUIDS = {
    "legacy": "m-1",
    "empty": "",
    "word": "not-a-uuid",
    "number": "42",
    "no-hyphens": "00000000000000000000000000000001",
    "braces": "{00000000-0000-0000-0000-000000000001}",
    "urn": "urn:uuid:00000000-0000-0000-0000-000000000001",
    "non-hex": "00000000-0000-0000-0000-00000000000g",
    "too-long": "00000000-0000-0000-0000-0000000000001",
    "too-short": "00000000-0000-0000-0000-00000000001",
    "nul": "00000000-0000-0000-0000-000000000001\x00",
}


def _envelope_only() -> dict[str, Any]:
    return {k: v for k, v in _event().items() if k not in ("memory_id", "revision")}


@pytest.mark.parametrize("value", NOT_UUIDS.values(), ids=NOT_UUIDS.keys())
def test_memory_id_that_is_not_a_uuid_is_rejected_naming_the_field(value: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(memory_id=value))
    _assert_names_field(info.value, "memory_id")
    with pytest.raises(ValidationError) as info:
        MemorySuperseded(**_event(superseded_by=value))
    _assert_names_field(info.value, "superseded_by")
    with pytest.raises(ValidationError) as info:
        MemoryRef(memory_id=value, revision=2)
    _assert_names_field(info.value, "memory_id")


def test_memory_id_of_a_written_memory_must_be_a_uuid() -> None:
    body = MemoryBody(
        kind="fact",
        content=SealedText(**SEALED),
        personal=SealedText(**SEALED),
        purpose="support",
        scope_type="subject",
        provenance=ClearProvenance(writer="agent", written_at=NOW),
        confidence=1.0,
    )
    assert MemoryWritten(**_envelope_only(), memory_id=MID, memory=body).memory_id == MID
    with pytest.raises(ValidationError) as info:
        MemoryWritten(**_envelope_only(), memory_id="m-1", memory=body)
    _assert_names_field(info.value, "memory_id")


def test_affected_memory_ids_must_be_uuids_and_the_error_names_the_item() -> None:
    affected = [{"memory_id": MID, "revision": 2}, {"memory_id": "m-2", "revision": 2}]
    with pytest.raises(ValidationError) as info:
        RetentionExpired(**_envelope_only(), affected=affected)
    _assert_names_field(info.value, "affected.1.memory_id")


def test_surrounding_white_space_of_a_memory_id_is_stripped() -> None:
    assert MemoryConfirmed(**_event(memory_id=f" {MID}\n")).memory_id == MID


@pytest.mark.parametrize("field", ["memory_id", "superseded_by"])
def test_decode_rejects_an_event_whose_memory_id_is_not_a_uuid(field: str) -> None:
    event = MemorySuperseded(**_event(superseded_by=str(uuid.UUID(int=2))))
    raw = json.loads(encode_event(event))
    raw[field] = "m-1"
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert field in info.value.reason


# --------------------------------------------------------------------------- identifiers and content

CONTROL_IN_IDS = {
    "nul": "user\x00-1",
    "escape": "user-1\x1b[31m-red",
    "bell": "\x07user-1",
    "inner-newline": "user\n1",
    "inner-tab": "user\t1",
    "inner-cr": "user\r1",
    "del": "user\x7f1",
}
WORKSPACE = {"type": "workspace", "id": "w-1"}


@pytest.mark.parametrize("value", CONTROL_IN_IDS.values(), ids=CONTROL_IN_IDS.keys())
@pytest.mark.parametrize("field", ["subject_id", "purpose"])
def test_identifier_with_a_control_character_is_rejected(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(**{field: value, "scope": WORKSPACE}))
    _assert_names_field(info.value, field)
    assert "control characters" in str(info.value)


@pytest.mark.parametrize("value", CONTROL_IN_IDS.values(), ids=CONTROL_IN_IDS.keys())
def test_event_subject_id_with_a_control_character_is_rejected(value: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(subject_id=value))
    _assert_names_field(info.value, "subject_id")
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["subject_id"] = value
    with pytest.raises(UnknownEventError) as decode_info:
        decode_event(json.dumps(raw).encode())
    assert "subject_id" in decode_info.value.reason


@settings(deadline=None)
@given(prefix=ids, control=st.sampled_from(_CONTROL), suffix=ids)
def test_any_control_character_inside_an_identifier_is_rejected(prefix: str, control: str, suffix: str) -> None:
    with pytest.raises(ValidationError) as info:
        Scope(type="workspace", id=f"{prefix}{control}{suffix}")
    _assert_names_field(info.value, "id")


def test_white_space_around_an_identifier_is_stripped_not_refused() -> None:
    command = MemoryWrite(**_write(subject_id="\tuser-1 \n", purpose=" support\r\n"))
    assert (command.subject_id, command.purpose) == ("user-1", "support")


@pytest.mark.parametrize(
    "value",
    ["é" * 257, "中" * 171, "🙂" * 129, "x" * 513],
    ids=["2-byte-514", "3-byte-513", "4-byte-516", "ascii-513"],
)
def test_identifier_over_512_utf8_bytes_is_rejected(value: str) -> None:
    assert len(value.encode("utf-8")) > 512
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(subject_id=value, scope=WORKSPACE))
    _assert_names_field(info.value, "subject_id")
    with pytest.raises(ValidationError) as info:
        MemoryConfirmed(**_event(subject_id=value))
    _assert_names_field(info.value, "subject_id")


@pytest.mark.parametrize("value", ["x" * 512, "é" * 256, "🙂" * 128], ids=["ascii", "2-byte", "4-byte"])
def test_identifier_of_exactly_512_utf8_bytes_is_accepted(value: str) -> None:
    assert len(value.encode("utf-8")) == 512
    assert MemoryWrite(**_write(subject_id=value, scope=WORKSPACE)).subject_id == value


CONTROL_IN_CONTENT = {
    "nul": "likes green\x00tea",
    "escape": "\x1b[2Jlikes green tea",
    "bell": "likes green tea\x07",
    "vertical-tab": "likes\x0bgreen tea",
    "form-feed": "likes\x0cgreen tea",
    "del": "likes green tea\x7f",
}


@pytest.mark.parametrize("content", CONTROL_IN_CONTENT.values(), ids=CONTROL_IN_CONTENT.keys())
def test_content_with_a_control_character_is_rejected(content: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(content=content))
    _assert_names_field(info.value, "content")
    assert "control characters" in str(info.value)


@pytest.mark.parametrize(
    "content",
    ["line one\nline two", "name\tvalue", "windows\r\nline", "\tindented\n", "\n\nlikes tea\r"],
    ids=["newline", "tab", "crlf", "leading-tab", "surrounding"],
)
def test_content_may_hold_tab_newline_and_carriage_return_kept_as_is(content: str) -> None:
    assert MemoryWrite(**_write(content=content)).content == content


@pytest.mark.parametrize(
    "content",
    [" ", "     ", "\t", "\n\r\n", " \t\n ", "\u00a0\u3000"],
    ids=["space", "spaces", "tab", "newlines", "mixed", "unicode-spaces"],
)
def test_whitespace_only_content_is_rejected(content: str) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(content=content))
    _assert_names_field(info.value, "content")
    assert "white space" in str(info.value)


@settings(deadline=None)
@given(content=contents, control=st.sampled_from(_CONTROL_BUT_TAB_NL_CR))
def test_any_forbidden_control_character_in_content_is_rejected(content: str, control: str) -> None:
    assert MemoryWrite(**_write(content=content)).content == content
    with pytest.raises(ValidationError) as info:
        MemoryWrite(**_write(content=content + control))
    _assert_names_field(info.value, "content")


# --------------------------------------------------------------------------- sealed text


@pytest.mark.parametrize("size", [1, 8, 11, 13, 16, 24])
def test_sealed_text_nonce_must_be_12_bytes(size: int) -> None:
    with pytest.raises(ValidationError) as info:
        SealedText(key_id=MID, nonce=_b64(bytes(size)), ciphertext=CIPHERTEXT)
    _assert_names_field(info.value, "nonce")
    assert "12 bytes" in str(info.value)


@pytest.mark.parametrize("size", [1, 8, 15])
def test_sealed_text_ciphertext_must_hold_at_least_the_16_byte_tag(size: int) -> None:
    with pytest.raises(ValidationError) as info:
        SealedText(key_id=MID, nonce=NONCE, ciphertext=_b64(bytes(size)))
    _assert_names_field(info.value, "ciphertext")
    assert SealedText(key_id=MID, nonce=NONCE, ciphertext=_b64(bytes(16))).ciphertext == _b64(bytes(16))


def test_sealed_text_with_bad_base64_padding_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        SealedText(key_id=MID, nonce="AAAAA", ciphertext=CIPHERTEXT)
    assert "base64" in str(info.value)


def test_decode_rejects_sealed_content_with_a_short_nonce() -> None:
    raw = json.loads(encode_event(MemoryRedacted(**_event(fields=["content"], content=SEALED))))
    raw["content"]["nonce"] = _b64(bytes(8))
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "nonce" in info.value.reason


# --------------------------------------------------------------------------- decode_event errors


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80\x81\x82", b"\xff\xfe\x00garbage", b"{not json", b"\x00\x01\x02", b'{"type": "MemoryConfirmed"'],
    ids=["empty", "invalid-utf8", "bom-garbage", "broken-json", "control-bytes", "truncated"],
)
def test_decode_rejects_garbage_bytes(data: bytes) -> None:
    with pytest.raises(UnknownEventError) as info:
        decode_event(data)
    assert "not valid UTF-8 JSON" in info.value.reason


@settings(deadline=None, max_examples=200)
@given(data=st.binary(max_size=200))
def test_decode_of_arbitrary_bytes_raises_only_unknown_event_error(data: bytes) -> None:
    with pytest.raises(UnknownEventError) as info:
        decode_event(data)
    assert info.value.reason
    assert str(info.value) == info.value.reason


json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
non_object_json = st.one_of(json_scalars, st.lists(json_scalars | st.dictionaries(st.text(max_size=5), json_scalars)))


@settings(deadline=None)
@given(value=non_object_json)
def test_decode_rejects_json_that_is_not_an_object(value: object) -> None:
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(value).encode())
    assert "JSON object" in info.value.reason


def test_decode_rejects_unknown_type_naming_it() -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["type"] = "MemoryExploded"
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "MemoryExploded" in info.value.reason
    assert "type" in info.value.reason


def test_decode_rejects_missing_type() -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    del raw["type"]
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "type" in info.value.reason


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, SCHEMA_VERSION + 41])
def test_decode_rejects_a_newer_schema_version(version: int) -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["schema_version"] = version
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "schema_version" in info.value.reason
    assert "newer" in info.value.reason
    assert str(version) in info.value.reason


@pytest.mark.parametrize("version", [0, -1, "1", 1.5, None], ids=["0", "-1", "string", "float", "null"])
def test_decode_rejects_a_schema_version_that_is_not_a_positive_integer(version: object) -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["schema_version"] = version
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "schema_version" in info.value.reason


def test_decode_reports_the_failing_field_of_a_known_type() -> None:
    raw = json.loads(encode_event(MemoryConfirmed(**_event())))
    raw["revision"] = 1  # a confirmation produces revision >= 2
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(raw).encode())
    assert "revision" in info.value.reason
    assert "https://" not in info.value.reason


DEPTH = 100_000


@pytest.mark.parametrize(
    "data",
    [
        b"[" * DEPTH + b"]" * DEPTH,
        b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
        b'{"type": "MemoryWritten", "memory": ' + b'{"a":' * DEPTH + b"1" + b"}" * DEPTH + b"}",
    ],
    ids=["arrays", "objects", "inside-an-event"],
)
def test_decode_of_100000_deep_nested_json_is_an_unknown_event(data: bytes) -> None:
    with pytest.raises(UnknownEventError) as info:
        decode_event(data)
    assert info.value.reason
    assert str(info.value) == info.value.reason
    assert len(info.value.reason) < 1_000, "the reason must not echo the input"


def test_decode_of_json_with_a_5000_digit_integer_is_an_unknown_event() -> None:
    digits = b"9" * 5000
    encoded = encode_event(MemoryConfirmed(**_event()))
    assert b'"revision":2' in encoded
    for data in (digits, encoded.replace(b'"revision":2', b'"revision":' + digits)):
        with pytest.raises(UnknownEventError) as info:
            decode_event(data)
        assert info.value.reason
        assert len(info.value.reason) < 1_000, "the reason must not echo the input"


# --------------------------------------------------------------------------- immutability


@settings(deadline=None)
@given(event=events)
def test_events_are_frozen(event: Event) -> None:
    before = encode_event(event)
    with pytest.raises(ValidationError) as info:
        event.subject_id = "someone-else"  # type: ignore[misc]
    assert info.value.errors()[0]["type"] == "frozen_instance"
    with pytest.raises(ValidationError):
        event.occurred_at = NOW  # type: ignore[misc]
    assert encode_event(event) == before


@settings(deadline=None)
@given(command=memory_writes())
def test_commands_and_their_parts_are_frozen(command: MemoryWrite) -> None:
    before = command.model_dump_json()
    with pytest.raises(ValidationError):
        command.subject_id = "someone-else"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        command.provenance.writer = "mallory"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        command.scope.id = "elsewhere"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        command.retention.expires_at = None  # type: ignore[misc]
    assert command.model_dump_json() == before


def test_event_bodies_are_frozen() -> None:
    event = MemoryWritten(
        **{k: v for k, v in _event().items() if k != "revision"},
        memory=MemoryBody(
            kind="fact",
            content=SealedText(**SEALED),
            personal=SealedText(**SEALED),
            purpose="support",
            scope_type="subject",
            provenance=ClearProvenance(writer="agent", written_at=NOW),
            confidence=1.0,
        ),
    )
    with pytest.raises(ValidationError):
        event.memory.confidence = 0.1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event.memory.content.ciphertext = "other"  # type: ignore[misc]
    ref = MemoryRef(memory_id=MID, revision=3)
    with pytest.raises(ValidationError):
        ref.revision = 4  # type: ignore[misc]
    assert (event.memory.confidence, event.memory.content.ciphertext, ref.revision) == (1.0, CIPHERTEXT, 3)


# --------------------------------------------------------------------------- JSON Schema


def test_checked_in_schema_matches_the_models() -> None:
    assert SCHEMA_PATH.exists(), f"{SCHEMA_PATH} is missing: run `python -m contracts.schema`"
    checked_in = SCHEMA_PATH.read_text(encoding="utf-8")
    assert checked_in == render_schema(), (
        f"{SCHEMA_PATH} is out of date with the contract models: run `python -m contracts.schema` and commit it"
    )


def test_schema_covers_every_event_type_and_the_write_command() -> None:
    schema = current_schema()
    definitions = schema["events"]["$defs"]
    for event_type in EVENT_TYPES:
        assert event_type.__name__ in definitions
    assert set(schema["events"]["discriminator"]["mapping"]) == {t.__name__ for t in EVENT_TYPES}
    assert "MemoryWrite" in schema["commands"]
    assert json.loads(render_schema()) == schema


@pytest.mark.parametrize("char", ["x", "é", "中", "🙂"], ids=["1-byte", "2-byte", "3-byte", "4-byte"])
def test_sealed_text_holds_the_ciphertext_of_the_longest_allowed_content(char: str) -> None:
    """Regression: SealedText once capped ciphertext at 512 characters (over 368 bytes of text failed)."""
    longest = MemoryWrite(**_write(content=char * 65_536))
    ciphertext_bytes = len(longest.content.encode("utf-8")) + 16  # AES-GCM tag
    ciphertext = "A" * (4 * -(-ciphertext_bytes // 3))  # URL-safe base64 length
    sealed = SealedText(key_id=MID, nonce=NONCE, ciphertext=ciphertext)
    assert len(sealed.ciphertext) == len(ciphertext)


@pytest.mark.parametrize("field", ["nonce", "ciphertext"])
@pytest.mark.parametrize("value", ["", "not base64!", "a+b/c", "has space"], ids=["empty", "bang", "std-b64", "space"])
def test_sealed_text_fields_must_be_url_safe_base64(field: str, value: str) -> None:
    fields = dict(SEALED)
    fields[field] = value
    with pytest.raises(ValidationError) as info:
        SealedText(**fields)
    _assert_names_field(info.value, field)


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ({"memory_ids": ("m-1", "m-2")}, "memories"),
        ({"whole_subject": True}, "subject"),
        ({"source_ref": "turn-7"}, "source"),
    ],
)
def test_erasure_command_names_exactly_one_target(target: dict[str, Any], kind: str) -> None:
    cmd = EraseMemories.model_validate({"subject_id": "alice", "reason": "asked", **target})
    assert cmd.request_kind == kind


@pytest.mark.parametrize(
    "target",
    [
        {},
        {"memory_ids": ("m-1",), "whole_subject": True},
        {"memory_ids": ("m-1",), "source_ref": "turn-7"},
        {"whole_subject": True, "source_ref": "doc-1"},
    ],
)
def test_erasure_command_with_no_or_several_targets_is_refused_naming_the_field(target: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        EraseMemories.model_validate({"subject_id": "alice", "reason": "asked", **target})
    assert describe_validation_error(info.value).startswith("memory_ids: give exactly one of")


def test_erasure_command_refuses_an_empty_source() -> None:
    with pytest.raises(ValidationError) as info:
        EraseMemories.model_validate({"subject_id": "alice", "reason": "asked", "source_ref": " "})
    assert "source_ref" in describe_validation_error(info.value)


def test_an_event_written_before_the_agent_label_reads_with_no_agent() -> None:
    from contracts import ClearProvenance

    old = {"writer": "cli", "written_at": "2026-01-01T00:00:00Z", "derived_from": []}
    assert ClearProvenance.model_validate(old).agent is None
    labelled = ClearProvenance.model_validate(old | {"agent": "planner"})
    assert labelled.agent == "planner" and labelled.writer == "cli"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("   ", "more than white space"),
        ("tea\x00", "control characters"),
        ("tea\x1b[31m", "control characters"),
        ("tea \ud800", "lone surrogate"),
    ],
)
def test_text_that_no_store_can_hold_is_named_by_its_rule(text: str, rule: str) -> None:
    problem = text_problem(text)
    assert problem is not None and rule in problem


def test_text_with_tabs_newlines_and_any_script_is_accepted() -> None:
    assert text_problem("thé\tau lait\r\n日本語 🍵") is None


def test_a_time_as_text_is_iso_8601_utc_with_z_as_the_http_api_writes_it() -> None:
    moment = datetime(2026, 12, 2, 9, 3, 6, 109607, tzinfo=timezone(timedelta(hours=2)))
    assert iso_utc(moment) == "2026-12-02T07:03:06.109607Z"
    assert iso_utc(moment.replace(microsecond=0)) == "2026-12-02T07:03:06Z"
    assert iso_utc(moment) == TypeAdapter(AwareDatetime).dump_python(moment.astimezone(UTC), mode="json")
    with pytest.raises(ValueError, match="naive"):
        iso_utc(datetime(2026, 12, 2, 7, 3, 6))


def _reinstatement(**fields: Any) -> dict[str, Any]:
    sealed = {"key_id": "k", "nonce": "AAAAAAAAAAAAAAAA", "ciphertext": "A" * 24}
    state = {"status": "needs_confirmation", "kind": "fact", "purpose": "p", "scope_type": "subject"}
    return _event(revision=3, content=sealed, personal=sealed, state=state, **fields)


OTHER = str(uuid.UUID(int=7))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, "replacement"),
        ({"reason": "rival_erased"}, "rival"),
        ({"reason": "rival_erased", "replacement": OTHER}, "rival"),
        ({"replacement": OTHER, "rival": OTHER}, "rival"),
        ({"reason": "rival_erased", "rival": OTHER, "replacement": OTHER}, "replacement"),
    ],
)
def test_a_reinstatement_names_the_erased_memory_in_the_field_its_reason_says(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryReinstated(**_reinstatement(**fields))
    _assert_names_field(info.value, named)


def test_a_reinstatement_for_an_erased_rival_names_the_rival() -> None:
    event = MemoryReinstated(**_reinstatement(reason="rival_erased", rival=OTHER))
    assert (event.reason, event.rival, event.replacement, event.schema_version) == ("rival_erased", OTHER, None, 2)
