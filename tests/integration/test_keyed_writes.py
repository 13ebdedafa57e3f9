"""A write that supersedes its key (``supersede_key``: a key-value store's put) and the
listing narrowed to a purpose, a key or a key prefix and to what has not expired, over
the gateway on the test services."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from contracts import utc_now
from tests.integration.conftest import caller
from workers import wire
from workers.bootstrap import Services
from workers.gateway import Caller, Gateway, InvalidRequestError

pytestmark = pytest.mark.integration

P = "agent_memory"


@pytest.fixture
def alice(gateway: Gateway) -> Caller:
    return caller(gateway, "alice")


def put(gateway: Gateway, who: Caller, key: str, content: str, **fields: object) -> wire.CommandAck:
    memory = wire.WriteMemory.model_validate(
        {"content": content, "purpose": P, "key": key, "veracity": "inferred", "supersede_key": True} | fields
    )
    return gateway.write(who, "alice", memory)


def test_supersede_key_replaces_the_slot_whatever_the_source_and_never_reinforces(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    first = put(gateway, alice, "drink", "Tea", source_ref="doc-1")
    # the same text again (only its case differs): a new memory that supersedes, not a reinforcement
    again = put(gateway, alice, "drink", "tea", expires_at=utc_now() + timedelta(days=3))
    assert [e.type for e in again.events] == ["MemoryWritten", "MemorySuperseded"]
    assert again.memory_id != first.memory_id
    # another source, an inference's veracity: still no conflict, the slot is replaced
    other = put(gateway, alice, "drink", "coffee", source_ref="doc-2")
    assert [e.type for e in other.events] == ["MemoryWritten", "MemorySuperseded"]
    live = svc.ledger.live(svc.principal(), "alice", P, "drink")
    assert [(m.head.memory_id, m.content, m.head.status) for m in live] == [(other.memory_id, "coffee", "active")]

    batch = gateway.write_batch(
        alice,
        "alice",
        wire.WriteBatch(
            memories=[
                wire.WriteMemory(content="green tea", purpose=P, key="drink", supersede_key=True),
                wire.WriteMemory(content="green tea", purpose=P, key="drink", supersede_key=True),
            ]
        ),
    )
    assert [[e.type for e in r.events] for r in batch.results] == [["MemoryWritten", "MemorySuperseded"]] * 2

    # without it, the same text again reinforces the live memory, as before
    plain = gateway.write(alice, "alice", wire.WriteMemory(content="Green tea.", purpose=P, key="drink"))
    assert [e.type for e in plain.events] == ["MemoryReinforced"]
    assert plain.memory_id == batch.results[1].memory_id


def test_a_retried_put_appends_nothing_and_a_put_in_another_turn_replaces_the_slot(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    first = put(gateway, alice, "city", "Lisbon", turn_id="turn-1")
    retry = put(gateway, alice, "city", "Lisbon", turn_id="turn-1")
    assert retry.events == [] and retry.repeat and retry.memory_id == first.memory_id
    assert retry.first_event_ids == [e.event_id for e in first.events]
    # the same put as a plain write is another command: not a retry of the put
    plain = gateway.write(alice, "alice", wire.WriteMemory(content="Lisbon", purpose=P, key="city", turn_id="turn-1"))
    assert plain.repeat is None and [e.type for e in plain.events] == ["MemoryReinforced"]
    later = put(gateway, alice, "city", "Lisbon", turn_id="turn-2")
    assert [e.type for e in later.events] == ["MemoryWritten", "MemorySuperseded"]
    live = svc.ledger.live(svc.principal(), "alice", P, "city")
    assert [m.head.memory_id for m in live] == [later.memory_id]


def test_supersede_key_needs_a_key_and_writes_nothing_without_one(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        gateway.write(alice, "alice", wire.WriteMemory(content="x", purpose=P, supersede_key=True))
    assert refused.value.field == "supersede_key" and "needs a key" in refused.value.rule
    assert svc.ledger.live(svc.principal(), "alice", P, "") == []


def test_the_listing_narrowed_to_a_purpose_a_key_a_prefix_and_what_has_not_expired(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    first = put(gateway, alice, "lg:a/x", "one")
    time.sleep(0.01)  # the next revision is written later
    second = put(gateway, alice, "lg:a/x", "two")
    put(gateway, alice, "lg:a/y", "three")
    put(gateway, alice, "lg:b", "four")
    put(gateway, alice, "lg:a/soon", "five")
    gateway.write(alice, "alice", wire.WriteMemory(content="elsewhere", purpose="other", key="lg:a/x"))
    svc.catch_up()

    def keys(**narrow: object) -> list[tuple[str | None, str | None]]:
        page = gateway.memories(alice, "alice", **narrow)  # type: ignore[arg-type]
        return sorted((m.key, m.content) for m in page.memories)

    assert keys(purpose=P, key_prefix="lg:a/") == [("lg:a/soon", "five"), ("lg:a/x", "two"), ("lg:a/y", "three")]
    assert keys(purpose=P, key="lg:a/x") == [("lg:a/x", "two")]
    assert keys(key="lg:a/x") == [("lg:a/x", "elsewhere"), ("lg:a/x", "two")]
    every = gateway.memories(alice, "alice", include_all=True, purpose=P, key="lg:a/x").memories
    assert {m.status for m in every} == {"active", "superseded"}  # no erased rows: they hold no key
    live = next(m for m in every if m.memory_id == second.memory_id)
    old = next(m for m in every if m.memory_id == first.memory_id)
    assert old.written_at is not None and live.written_at is not None and old.written_at < live.written_at
    assert live.first_written_at == old.written_at == old.first_written_at  # since when the key has had a value


def test_unexpired_leaves_out_what_has_expired_swept_or_not(gateway: Gateway, svc: Services, alice: Caller) -> None:
    expires_at = utc_now() + timedelta(seconds=3)
    soon = put(gateway, alice, "lg:soon", "five", expires_at=expires_at)
    put(gateway, alice, "lg:later", "six")
    svc.catch_up()
    assert {m.key for m in gateway.memories(alice, "alice", unexpired=True).memories} == {"lg:soon", "lg:later"}
    time.sleep(max(0.0, (expires_at - utc_now()).total_seconds()) + 0.1)
    narrowed = gateway.memories(alice, "alice", unexpired=True).memories
    assert {m.key for m in narrowed} == {"lg:later"}
    unswept = gateway.memories(alice, "alice").memories  # not swept: still listed as live without it
    assert soon.memory_id in {m.memory_id for m in unswept}


def test_puts_of_one_key_at_once_leave_one_live_memory_and_a_confirmation_settles_its_slot(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    """Each write locks its slot before it reads it: without that, writes of one key at
    once each missed the others' memories (not yet committed) and the slot kept several
    live answers."""
    n = 8
    start = threading.Barrier(n)

    def racing_put(i: int) -> wire.CommandAck:
        start.wait()
        return put(gateway, alice, "drink", f"drink number {i}")

    with ThreadPoolExecutor(n) as pool:
        acks = list(pool.map(racing_put, range(n)))
    live = svc.ledger.live(svc.principal(), "alice", P, "drink")
    assert len(live) == 1 and live[0].head.memory_id in {a.memory_id for a in acks}
    superseded = [e for a in acks for e in a.events if e.type == "MemorySuperseded"]
    assert len(superseded) == n - 1  # every put but the first replaced exactly one live memory

    # two inferences of one key from two sources at once: a conflict, both awaiting confirmation
    both = threading.Barrier(2)

    def claim(source: str) -> wire.CommandAck:
        both.wait()
        return gateway.write(
            alice,
            "alice",
            wire.WriteMemory(
                content=f"lives in {source}", purpose=P, key="city", source_ref=source, veracity="inferred"
            ),
        )

    with ThreadPoolExecutor(2) as pool:
        lille, lyon = pool.map(claim, ["Lille", "Lyon"])
    rivals = svc.ledger.live(svc.principal(), "alice", P, "city")
    assert sorted(m.head.status for m in rivals) == ["needs_confirmation", "needs_confirmation"]
    assert lille.memory_id is not None and lyon.memory_id is not None
    svc.ledger.confirm(svc.principal(), "alice", lille.memory_id)
    [settled] = svc.ledger.live(svc.principal(), "alice", P, "city")
    assert (settled.head.memory_id, settled.head.status) == (lille.memory_id, "active")


def test_a_refused_memory_of_a_batch_is_named_by_its_place_and_nothing_is_written(
    gateway: Gateway, svc: Services, alice: Caller
) -> None:
    ok = wire.WriteMemory(content="Alice reads at night", purpose=P)
    ends = svc.log.end_offsets()
    for bad, field in [
        (wire.WriteMemory(content="x", purpose=P, confidence=2), "memories.1.confidence"),  # the contract's rule
        (wire.WriteMemory(content="the key is AKIAIOSFODNN7EXAMPLE", purpose=P), "memories.1.content"),  # screening
        (wire.WriteMemory(content="y", purpose=P, expires_at=utc_now()), "memories.1.expires_at"),  # the body's name
        (wire.WriteMemory(content="z", purpose=P, supersede_key=True), "memories.1.supersede_key"),
    ]:
        with pytest.raises(InvalidRequestError) as refused:
            gateway.write_batch(alice, "alice", wire.WriteBatch(memories=[ok, bad]))
        assert refused.value.field == field, refused.value
        with pytest.raises(InvalidRequestError) as alone:  # a single write names the field alone
            gateway.write(alice, "alice", bad)
        assert alone.value.field == field.removeprefix("memories.1.")
    assert svc.log.end_offsets() == ends
