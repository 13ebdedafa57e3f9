"""Per-type schema versions and chained upcasters (no I/O): every chain is complete,
steps run version by version, a newer version or a missing step is refused with a reason
that names the type and versions, and any v1 event upcast through the registered chain
validates against the current model."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import given, settings

from contracts import (
    EVENT_TYPES,
    SCHEMA_VERSIONS,
    Envelope,
    Event,
    MemoryConfirmed,
    MemoryReinstated,
    MemoryWritten,
    UnknownEventError,
    UpcastError,
    decode_event,
    encode_event,
    evolved,
)
from contracts.serialization import DEFAULT_CODEC, EventCodec, active_codec, build_codec
from contracts.upcasting import DEFAULT_REGISTRY, RawEvent, UpcasterRegistry
from tests.evolution import CURRENT, EVOLVED, MODELS_EVOLVED, UPCASTERS_EVOLVED, MemoryWrittenEvolved
from tests.unit.test_contracts import EVENT_STRATEGIES, events

CODECS = {"current": DEFAULT_CODEC, "evolved": build_codec(MODELS_EVOLVED, UPCASTERS_EVOLVED)}


def test_every_type_has_a_version_and_a_complete_chain() -> None:
    assert set(SCHEMA_VERSIONS) == {t.model_fields["type"].default for t in EVENT_TYPES}
    assert DEFAULT_REGISTRY.missing_steps() == []
    assert CODECS["evolved"].registry.missing_steps() == []
    assert CODECS["evolved"].registry.versions["MemoryWritten"] == EVOLVED
    assert CODECS["evolved"].registry.versions["MemoryConfirmed"] == 1  # types evolve on their own


def test_steps_run_in_order_and_set_each_version() -> None:
    seen: list[tuple[int, Any]] = []

    def step(n: int) -> Any:
        def go(raw: RawEvent) -> RawEvent:
            seen.append((n, raw["schema_version"]))
            raw[f"s{n}"] = True
            return raw

        return go

    registry = UpcasterRegistry({"T": 4}, {("T", 1): step(1), ("T", 2): step(2), ("T", 3): step(3)})
    out = registry.upcast({"type": "T", "schema_version": 1})
    assert seen == [(1, 1), (2, 2), (3, 3)]
    assert out == {"type": "T", "schema_version": 4, "s1": True, "s2": True, "s3": True}
    assert registry.upcast({"type": "T", "schema_version": 3}) == {"type": "T", "schema_version": 4, "s3": True}
    assert registry.upcast({"type": "T"})["schema_version"] == 4  # no version means version 1


def test_a_newer_version_and_a_missing_step_are_refused_naming_type_and_versions() -> None:
    registry = UpcasterRegistry({"T": 3}, {("T", 2): lambda raw: raw})
    with pytest.raises(UpcastError, match=r"T v4 is newer than this reader's v3"):
        registry.upcast({"type": "T", "schema_version": 4})
    with pytest.raises(UpcastError, match=r"no upcaster for T v1 -> v2 \(this reader is at v3\)"):
        registry.upcast({"type": "T", "schema_version": 1})
    assert registry.missing_steps() == [("T", 1)]


@pytest.mark.parametrize("version", [True, 0, "2", 2.0])
def test_a_version_that_is_not_a_positive_integer_is_refused(version: object) -> None:
    with pytest.raises(UpcastError, match="schema_version: must be a positive integer"):
        DEFAULT_REGISTRY.upcast({"type": "MemoryConfirmed", "schema_version": version})


def test_an_unknown_type_is_left_to_validation() -> None:
    raw = {"type": "MemoryExploded", "schema_version": 7}
    assert DEFAULT_REGISTRY.upcast(dict(raw)) == raw


def test_an_upcaster_that_returns_no_object_is_refused() -> None:
    registry = UpcasterRegistry({"T": 2}, {("T", 1): lambda raw: None})  # type: ignore[arg-type,return-value]
    with pytest.raises(UpcastError, match="returned no object"):
        registry.upcast({"type": "T", "schema_version": 1})


def _v1(event: Event) -> RawEvent:
    raw: RawEvent = json.loads(DEFAULT_CODEC.encode(event))
    return raw


@settings(deadline=None, max_examples=150)
@given(event=events)
@pytest.mark.parametrize("codec_name", sorted(CODECS))
def test_any_registered_chain_lifts_a_v1_event_to_a_dict_the_current_model_validates(
    codec_name: str, event: Event
) -> None:
    codec: EventCodec = CODECS[codec_name]
    raw = _v1(event)
    current = codec.registry.versions[raw["type"]]
    lifted = codec.registry.upcast(json.loads(json.dumps(raw)))
    assert lifted["schema_version"] == current
    model = next(m for m in codec.models if m.model_fields["type"].default == raw["type"])
    validated = model.model_validate(lifted)
    # every field the v1 event carried survives the chain, under its (possibly new) name
    assert validated.model_dump() == event.model_dump() | {"schema_version": current}
    # a chain entered at any intermediate version ends in the same dict
    for start in range(2, current + 1):
        partial = json.loads(json.dumps(raw))
        for v in range(1, start):
            partial = codec.registry.steps[(raw["type"], v)](partial)
        partial["schema_version"] = start
        assert codec.registry.upcast(partial) == lifted


@settings(deadline=None, max_examples=50)
@given(event=EVENT_STRATEGIES[MemoryWritten])
def test_current_bytes_read_through_the_evolved_contract_give_the_evolved_model(event: MemoryWritten) -> None:
    data = encode_event(event)
    with evolved(MODELS_EVOLVED, UPCASTERS_EVOLVED):
        decoded = decode_event(data)
        again = decode_event(encode_event(decoded))
    assert type(decoded) is MemoryWrittenEvolved
    assert decoded.producer == event.producer and decoded.correlation_id == event.correlation_id
    assert decoded.schema_version == EVOLVED
    assert again == decoded
    assert active_codec() is DEFAULT_CODEC


def test_the_evolved_wire_format_uses_the_new_names_and_the_old_reader_refuses_it() -> None:
    base = _v1(
        MemoryConfirmed(
            event_id="e",
            occurred_at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
            subject_id="alice",
            producer="p",
            correlation_id="c",
            memory_id="00000000-0000-0000-0000-000000000001",
            revision=2,
        )
    )
    with evolved(MODELS_EVOLVED, UPCASTERS_EVOLVED):
        confirmed = decode_event(json.dumps(base).encode())  # an unevolved type reads as before
    assert isinstance(confirmed, MemoryConfirmed) and confirmed.schema_version == 1
    newer = {**base, "type": "MemoryWritten", "schema_version": EVOLVED}
    with pytest.raises(UnknownEventError) as info:
        decode_event(json.dumps(newer).encode())
    assert info.value.reason == (
        f"schema_version: MemoryWritten v{EVOLVED} is newer than this reader's v{CURRENT}"
        " (deploy a reader that knows it)"
    )
    assert info.value.event_type == "MemoryWritten"


def test_a_replacement_model_must_subclass_the_model_it_replaces() -> None:
    class NotAWrite(Envelope):
        type: Literal["MemoryWritten"] = "MemoryWritten"

    with pytest.raises(TypeError, match="must subclass"):
        build_codec([NotAWrite])


def test_evolved_restores_the_codec_after_an_error() -> None:
    with pytest.raises(RuntimeError), evolved(MODELS_EVOLVED, UPCASTERS_EVOLVED):
        assert active_codec() is not DEFAULT_CODEC
        raise RuntimeError("boom")
    assert active_codec() is DEFAULT_CODEC


def test_a_version_1_write_reads_as_unscreened() -> None:
    """Events written before screening existed (``MemoryWritten``, ``SummaryDerived`` and
    ``MemoryRedacted`` v1) read with ``screening`` ``None``."""
    sealed = {"key_id": "k", "nonce": "AAAAAAAAAAAAAAAA", "ciphertext": "A" * 24}
    envelope = {
        "event_id": "e",
        "schema_version": 1,
        "occurred_at": "2026-01-01T00:00:00Z",
        "subject_id": "alice",
        "producer": "p",
        "correlation_id": "c",
        "memory_id": "00000000-0000-0000-0000-000000000001",
    }
    body = {
        "kind": "fact",
        "content": sealed,
        "personal": sealed,
        "purpose": "p",
        "scope_type": "subject",
        "provenance": {"writer": "w", "written_at": "2026-01-01T00:00:00Z"},
        "confidence": 1.0,
    }
    written = decode_event(json.dumps({**envelope, "type": "MemoryWritten", "memory": body}).encode())
    assert isinstance(written, MemoryWritten) and written.memory.screening is None
    assert written.schema_version == SCHEMA_VERSIONS["MemoryWritten"] == 2
    redacted = {**envelope, "type": "MemoryRedacted", "revision": 2, "fields": ["content"], "content": sealed}
    decoded = decode_event(json.dumps(redacted).encode())
    assert decoded.type == "MemoryRedacted" and decoded.screening is None and decoded.schema_version == 2


REINSTATED_V1 = {
    "event_id": "e",
    "schema_version": 1,
    "type": "MemoryReinstated",
    "occurred_at": "2026-01-01T00:00:00Z",
    "subject_id": "alice",
    "producer": "p",
    "correlation_id": "c",
    "memory_id": "00000000-0000-0000-0000-000000000001",
    "revision": 3,
    "replacement": "00000000-0000-0000-0000-000000000002",
    "content": {"key_id": "k", "nonce": "AAAAAAAAAAAAAAAA", "ciphertext": "A" * 24},
    "personal": {"key_id": "k", "nonce": "AAAAAAAAAAAAAAAA", "ciphertext": "A" * 24},
    "state": {"status": "needs_confirmation", "kind": "fact", "purpose": "p", "scope_type": "subject"},
}


def test_a_version_1_reinstatement_reads_as_its_replacement_erased_with_no_rival() -> None:
    """``MemoryReinstated`` v1 knew one reason; v2 adds ``rival_erased`` and ``rival``."""
    assert SCHEMA_VERSIONS["MemoryReinstated"] == 2
    for raw in (REINSTATED_V1, {k: v for k, v in REINSTATED_V1.items() if k != "schema_version"}):
        decoded = decode_event(json.dumps(raw).encode())
        assert isinstance(decoded, MemoryReinstated) and decoded.schema_version == 2
        assert (decoded.reason, decoded.replacement, decoded.rival) == (
            "replacement_erased",
            "00000000-0000-0000-0000-000000000002",
            None,
        )


def test_a_reader_of_version_1_refuses_a_reinstatement_for_an_erased_rival() -> None:
    """An older reader stops at a version-2 reinstatement (``rival_erased``) with a reason
    naming the versions instead of misreading it."""
    rival = {**REINSTATED_V1, "schema_version": 2, "reason": "rival_erased", "replacement": None}
    rival["rival"] = "00000000-0000-0000-0000-000000000003"
    decoded = decode_event(json.dumps(rival).encode())
    assert isinstance(decoded, MemoryReinstated) and decoded.rival == rival["rival"]
    old_reader = UpcasterRegistry({**SCHEMA_VERSIONS, "MemoryReinstated": 1})
    with pytest.raises(UpcastError, match="MemoryReinstated v2 is newer than this reader's v1"):
        old_reader.upcast(json.loads(json.dumps(rival)))
