"""Two gaps of issue 13 on the real stores, with the embedded mode's Postgres event log and
through Kafka, and again after a replay of every projection: an erasure with its history
also erases the earlier memories of the key that no supersession linked to it (revoked
within a consent grace period, past their ``expires_at`` before a sweep) and that still
hold content, and a plain erasure lists them; erasing one side of a conflict reinstates
the claim it leaves alone (``rival_erased``) instead of leaving it disputed for good."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, MemoryReinstated, RevokeConsent, utc_now
from projections.conflicts import list_conflicts
from projections.facts import STABLE
from projections.trace import EarlierVersion, ReinstatedRival, render_text, trace
from projections.trace_html import render_html
from tests.integration.conftest import local_settings, one, recall_ids
from tests.integration.distributed import distributed_settings
from tests.integration.test_boundary_rules import across_a_replay, point_status, write
from workers.bootstrap import Services, build
from workers.gateway.service import ack

pytestmark = pytest.mark.integration

GRACE_POLICY = """
[classes.public]
[classes.internal]
consent_grace_days = 7
[classes.personal]
requires = "consent_ref_or_contract"
[classes.restricted]
requires = "consent_ref"
cacheable = false
"""
"""Revoked memories of every class keep their keys for a week (the checked-in policy
destroys them at once)."""


@pytest.fixture(params=["postgres-log", "kafka"])
def svc(
    request: pytest.FixtureRequest, tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> Iterator[Services]:
    policy = tmp_path / "retention.toml"
    policy.write_text(GRACE_POLICY, encoding="utf-8")
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        settings = distributed_settings(tmp_path, bootstrap, fresh_dsn, redis_url)
        services = build(settings.model_copy(update={"retention_policy_file": policy}))
        assert services.tombstone_set is not None
        services.tombstone_set._interval_s = 0.0  # read the topic on every lookup: no timing in the test
    else:
        services = build(local_settings(tmp_path / "data", fresh_dsn, redis_url, retention_policy_file=policy))
    yield services
    services.close()


def keys_held(svc: Services, memory_ids: list[str]) -> int:
    return int(
        one(
            svc,
            "SELECT count(*) FROM memory_keys WHERE split_part(key_id, '/', 1) = ANY(%s) AND wrapped_key IS NOT NULL",
            memory_ids,
        )
    )


def revoked_passport(svc: Services) -> str:
    """A ``passport`` memory given under a consent that is then withdrawn: revoked, its
    keys kept by the grace period, so it still holds its content."""
    old = write(svc, "Sam's passport number is X1", "turn-1", key="passport", provenance={"consent_ref": "c-1"})
    svc.ledger.revoke_consent(svc.principal(), RevokeConsent(subject_id="alice", consent_ref="c-1"))
    assert one(svc, "SELECT status, sealed_content IS NOT NULL FROM ledger_memories WHERE memory_id = %s", old) == (
        "revoked",
        True,
    )
    return old


def expired_passport(svc: Services) -> str:
    """A ``passport`` memory past its ``expires_at`` that no sweep has expired: still
    ``active`` in the heads, holding its content, but no longer live."""
    old = write(
        svc,
        "Sam's passport number is X1",
        "turn-1",
        key="passport",
        retention={"expires_at": utc_now() + timedelta(seconds=2)},
    )
    time.sleep(2.1)
    return old


@pytest.mark.parametrize("left_as", ["revoked", "expired"])
def test_an_erasure_with_its_history_erases_the_earlier_memory_of_its_key_no_link_names(
    svc: Services, left_as: str
) -> None:
    p = svc.principal()
    old = revoked_passport(svc) if left_as == "revoked" else expired_passport(svc)
    new = write(svc, "Sam's passport number is Y2", "turn-2", key="passport")
    assert one(svc, "SELECT superseded_by FROM ledger_memories WHERE memory_id = %s", old) is None  # no link
    keep = write(svc, "Sam prefers aisle seats", "turn-3", key="seat")
    r = svc.ledger.erase(
        p, EraseMemories(subject_id="alice", memory_ids=(new,), reason="subject asked", with_history=True)
    )
    assert set(r.affected) == {new, old} and r.earlier_versions == () and r.reinstated == ()
    svc.catch_up()

    def no_passport_is_readable() -> None:
        both = [old, new]
        assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE memory_id = ANY(%s)", both) == 0
        assert (
            one(svc, "SELECT count(*) FROM ledger_memories WHERE memory_id = ANY(%s) AND status = 'erased'", both) == 2
        )
        assert keys_held(svc, both) == 0
        assert svc.stores.route().index.retrieve(both) == {}
        assert set(recall_ids(svc, "passport number", include_unconfirmed=True)).isdisjoint(both)
        assert keep in recall_ids(svc, "aisle seats")
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete", report
        assert report.with_history and set(report.memory_ids) == {old, new} and report.earlier_versions == []

    across_a_replay(svc, no_passport_is_readable)


def test_a_plain_erasure_lists_the_earlier_memory_of_its_key_that_still_holds_content(svc: Services) -> None:
    p = svc.principal()
    old = revoked_passport(svc)
    new = write(svc, "Sam's passport number is Y2", "turn-2", key="passport")
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(new,), reason="subject asked"))
    assert (r.affected, r.reinstated, r.earlier_versions) == ((new,), (), (old,))  # revoked: not reinstated
    assert one(svc, "SELECT earlier_versions FROM erasure_requests WHERE request_id = %s", r.request_id) == [old]
    svc.catch_up()

    def the_old_one_is_listed_as_it_is() -> None:
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete", report
        assert report.earlier_versions == [EarlierVersion(old, "revoked", True, False)]
        assert old not in recall_ids(svc, "passport number", include_unconfirmed=True)

    across_a_replay(svc, the_old_one_is_listed_as_it_is)
    # erasing it by id, as `erase` suggests, destroys its keys
    again = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(old,), reason="subject asked"))
    assert again.affected == (old,) and keys_held(svc, [old]) == 0


def conflicting(svc: Services, *employers: str) -> list[str]:
    """Claims of the ``employer`` key from different documents: a conflict, every claim
    ``needs_confirmation``."""
    ids = [
        write(
            svc,
            f"Sam works at {name}",
            f"turn-{i}",
            key="employer",
            veracity="imported",
            provenance={"source_ref": f"doc-{i}"},
        )
        for i, name in enumerate(employers)
    ]
    statuses = [one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", m) for m in ids]
    assert statuses == ["needs_confirmation"] * len(ids)
    return ids


def test_erasing_one_side_of_a_conflict_reinstates_the_claim_it_leaves_alone(svc: Services) -> None:
    p = svc.principal()
    kept, erased = conflicting(svc, "Foo Industries", "Bar Logistics")
    svc.catch_up()
    assert [c.open for c in list_conflicts(svc.pool, STABLE, "alice")] == [True]
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(erased,), reason="subject asked"))
    assert [e.type for e in r.events] == ["ErasureRequested", "MemoryReinstated"]
    [event] = [e for e in r.events if isinstance(e, MemoryReinstated)]
    assert (event.memory_id, event.reason, event.rival, event.replacement) == (kept, "rival_erased", erased, None)
    assert (r.affected, r.reinstated, r.rivals_reinstated) == ((erased,), (), (kept,))
    assert ack(r).rivals_reinstated == [kept]
    assert one(svc, "SELECT rivals_reinstated FROM erasure_requests WHERE request_id = %s", r.request_id) == [kept]
    assert one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", kept) == "needs_confirmation"
    svc.catch_up()

    def the_claim_left_awaits_confirmation_undisputed() -> None:
        assert one(svc, f"SELECT status FROM {STABLE.facts} WHERE memory_id = %s", kept) == "needs_confirmation"
        assert point_status(svc, kept) == "needs_confirmation" and point_status(svc, erased) is None
        assert kept not in recall_ids(svc, "where does Sam work")  # only with the unconfirmed
        unconfirmed = recall_ids(svc, "where does Sam work", include_unconfirmed=True)
        assert kept in unconfirmed and erased not in unconfirmed
        assert list_conflicts(svc.pool, STABLE, "alice") == []  # no open conflict is left to explain it
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete", report
        assert report.rivals_reinstated == [ReinstatedRival(kept, "needs_confirmation", True)]
        assert report.earlier_versions == []
        assert f"{kept}  needs_confirmation, holds content" in render_text(report)
        assert f'data-memory="{kept}"' in render_html(report).split('id="rivals"', 1)[1]
        assert report.to_dict()["rivals_reinstated"] == [
            {"memory_id": kept, "status": "needs_confirmation", "holds_content": True}
        ]

    across_a_replay(svc, the_claim_left_awaits_confirmation_undisputed, same_facts=True)

    confirmed = svc.ledger.confirm(p, "alice", kept)
    assert [e.type for e in confirmed.events] == ["MemoryConfirmed"]
    svc.catch_up()
    assert kept in recall_ids(svc, "where does Sam work")
    assert one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", kept) == "active"


def test_a_conflict_left_with_two_claims_stays_open_until_one_claim_is_left(svc: Services) -> None:
    p = svc.principal()
    first, second, third = conflicting(svc, "Foo Industries", "Bar Logistics", "Baz Shipping")
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(first,), reason="subject asked"))
    assert r.rivals_reinstated == () and [e.type for e in r.events] == ["ErasureRequested"]
    svc.catch_up()
    [conflict] = list_conflicts(svc.pool, STABLE, "alice")
    assert conflict.open and [m.status for m in conflict.members] == ["erased", *["needs_confirmation"] * 2]
    last = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(second,), reason="subject asked"))
    assert last.rivals_reinstated == (third,)
    [event] = [e for e in last.events if isinstance(e, MemoryReinstated)]
    assert (event.memory_id, event.rival) == (third, second)
    svc.catch_up()

    def the_third_awaits_confirmation() -> None:
        assert list_conflicts(svc.pool, STABLE, "alice") == []
        assert third in recall_ids(svc, "where does Sam work", include_unconfirmed=True)
        assert third not in recall_ids(svc, "where does Sam work")
        report = trace(svc.pool, last.request_id or "", svc.trace_targets())
        assert report.verdict == "complete" and report.rivals_reinstated == [
            ReinstatedRival(third, "needs_confirmation", True)
        ]

    across_a_replay(svc, the_third_awaits_confirmation)
