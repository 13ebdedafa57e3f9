"""Contracts: valid commands and events (hypothesis), the JSON round trip, UTC
normalisation, the rejections (each naming its field), ``decode_event`` errors,
immutability, and the checked-in JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from contracts import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemorySuperseded,
    MemoryWrite,
    MemoryWritten,
    Provenance,
    Retention,
    RetentionExpired,
    Scope,
    SealedText,
    SummaryDerived,
    UnknownEventError,
    decode_event,
    encode_event,
)
from contracts.schema import SCHEMA_PATH, current_schema, render_schema

# --------------------------------------------------------------------------- strategies

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@ éü中"
_B64_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_="

ids = st.text(alphabet=_ID_ALPHABET, min_size=1, max_size=24).filter(lambda s: s.strip() != "")
"""Identifier-like strings (``NonEmptyStr``); may hold inner spaces and non-ASCII letters."""

b64 = st.text(alphabet=_B64_ALPHABET, min_size=1, max_size=40)
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


retentions = st.builds(Retention, basis=st.sampled_from(RETENTION_BASES), expires_at=st.none() | aware_datetimes)
sealed_texts = st.builds(SealedText, key_id=ids, nonce=b64, ciphertext=b64)


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
        content=draw(st.text(min_size=1, max_size=200)),
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
    subject_or_other = draw(ids)
    return MemoryBody(
        kind=kind,
        content=draw(sealed_texts),
        key=draw(st.none() | ids),
        purpose=draw(ids),
        scope=Scope(type=draw(st.sampled_from(SCOPE_TYPES)), id=subject_or_other),
        provenance=draw(provenances(needs_sources=kind == "summary")),
        sensitivity=draw(st.sampled_from(SENSITIVITIES)),
        retention=draw(retentions),
        confirmed=draw(st.booleans()),
        confidence=draw(confidences),
        veracity=draw(st.sampled_from(VERACITIES)),
        content_hmac=draw(st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
    )


memory_refs = st.builds(MemoryRef, memory_id=ids, revision=st.integers(min_value=1, max_value=10_000))
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
    MemoryWritten: st.builds(MemoryWritten, memory_id=ids, memory=memory_bodies(), **_envelope()),
    SummaryDerived: st.builds(SummaryDerived, memory_id=ids, memory=memory_bodies(kind="summary"), **_envelope()),
    MemorySuperseded: st.builds(
        MemorySuperseded, memory_id=ids, revision=later_revisions, superseded_by=ids, **_envelope()
    ),
    MemoryConfirmed: st.builds(MemoryConfirmed, memory_id=ids, revision=later_revisions, **_envelope()),
    MemoryRedacted: st.builds(
        MemoryRedacted,
        memory_id=ids,
        revision=later_revisions,
        fields=st.lists(ids, max_size=3).map(tuple),
        content=sealed_texts,
        content_hmac=st.none() | ids,
        **_envelope(),
    ),
    ConsentRevoked: st.builds(
        ConsentRevoked, consent_ref=st.none() | ids, purpose=st.none() | ids, affected=affected, **_envelope()
    ),
    RetentionExpired: st.builds(RetentionExpired, affected=affected, **_envelope()),
    ErasureRequested: st.builds(
        ErasureRequested,
        request_id=ids,
        request_kind=st.sampled_from(("memories", "subject")),
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
    assert raw["schema_version"] == SCHEMA_VERSION
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
        "memory_id": "m-1",
        "memory": {
            "kind": "fact",
            "content": {"key_id": "m-1", "nonce": "bm9uY2U=", "ciphertext": "Y2lwaGVy"},
            "purpose": "support",
            "scope": {"type": "subject", "id": "user-1"},
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
        "memory_id": "m-1",
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
        "content": {"key_id": "k", "nonce": "n", "ciphertext": "c"},
        "purpose": "support",
        "scope": {"type": "workspace", "id": "w-1"},
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
        "content": {"key_id": "k", "nonce": "n", "ciphertext": "c"},
        "purpose": "support",
        "scope": {"type": "workspace", "id": "w-1"},
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
            content=SealedText(key_id="m-1", nonce="n", ciphertext="c"),
            purpose="support",
            scope=Scope(type="subject", id="user-1"),
            provenance=Provenance(writer="agent", written_at=NOW),
            confidence=1.0,
        ),
    )
    with pytest.raises(ValidationError):
        event.memory.confidence = 0.1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event.memory.content.ciphertext = "other"  # type: ignore[misc]
    ref = MemoryRef(memory_id="m-1", revision=3)
    with pytest.raises(ValidationError):
        ref.revision = 4  # type: ignore[misc]
    assert (event.memory.confidence, event.memory.content.ciphertext, ref.revision) == (1.0, "c", 3)


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
    sealed = SealedText(key_id="m-1", nonce="AAAAAAAAAAAAAAAA", ciphertext=ciphertext)
    assert len(sealed.ciphertext) == len(ciphertext)


@pytest.mark.parametrize("field", ["nonce", "ciphertext"])
@pytest.mark.parametrize("value", ["", "not base64!", "a+b/c", "has space"], ids=["empty", "bang", "std-b64", "space"])
def test_sealed_text_fields_must_be_url_safe_base64(field: str, value: str) -> None:
    fields = {"key_id": "m-1", "nonce": "bm9uY2U=", "ciphertext": "Y2lwaGVy"}
    fields[field] = value
    with pytest.raises(ValidationError) as info:
        SealedText(**fields)
    _assert_names_field(info.value, field)
