"""The rules for an erased memory's earlier versions and rivals (no I/O): which are earlier
versions, which are reinstated, which rivals are left alone and reinstated."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from contracts import SealedText, utc_now
from ledger.state import MemoryHead
from ledger.supersession import earlier_of, holding_content, reinstatements, rivals_left

NOW = utc_now()
SEALED = SealedText(key_id="k", nonce="AAAAAAAAAAAAAAAA", ciphertext="A" * 24)


def head(memory_id: str, status: str = "active", superseded_by: str | None = None, **fields: object) -> MemoryHead:
    base = MemoryHead(
        memory_id=memory_id,
        subject_id="alice",
        revision=2,
        status=status,
        kind="fact",
        purpose="p",
        derived_from=(),
        scope_type="subject",
        scope_id="alice",
        key="employer",
        sensitivity="internal",
        retention_basis="indefinite",
        expires_at=None,
        confidence=1.0,
        veracity="stated",
        source_ref=None,
        consent_ref=None,
        sealed_content=SEALED,
        revoked_at=None,
        superseded_by=superseded_by,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


OLD = head("old", "superseded", superseded_by="new")


@pytest.mark.parametrize("replacement_status", ["active", "needs_confirmation"])
def test_an_earlier_version_of_a_live_replacement_is_reinstated(replacement_status: str) -> None:
    (r,) = reinstatements({"new": head("new", replacement_status)}, [OLD], NOW)
    assert (r.head.memory_id, r.replacement) == ("old", "new")


@pytest.mark.parametrize(
    ("replacement", "older", "why"),
    [
        (head("new", "superseded", superseded_by="newer"), OLD, "the slot's answer is the newer memory"),
        (head("new", "revoked"), OLD, "the slot had no live answer before the erasure"),
        (head("new", "expired"), OLD, "the slot had no live answer before the erasure"),
        (head("new"), replace(OLD, kind="summary"), "a summary restates invalidated sources"),
        (head("new"), replace(OLD, sealed_content=None), "its keys are destroyed: no content"),
        (head("new"), replace(OLD, expires_at=NOW - timedelta(seconds=1)), "past its expires_at"),
        (head("new"), replace(OLD, status="revoked"), "not superseded any more"),
    ],
)
def test_other_earlier_versions_are_not(replacement: MemoryHead, older: MemoryHead, why: str) -> None:
    assert reinstatements({"new": replacement}, [older], NOW) == [], why


def test_a_version_erased_in_the_same_request_is_not_reinstated() -> None:
    assert reinstatements({"new": head("new"), "old": OLD}, [OLD], NOW) == []


def test_holding_content_keeps_the_order_given() -> None:
    heads = {"a": OLD, "b": replace(OLD, memory_id="b", sealed_content=None), "c": replace(OLD, memory_id="c")}
    assert holding_content(heads, ["c", "b", "a", "missing"]) == ["c", "a"]


def test_the_nearest_version_not_erased_is_reinstated_through_a_chain_erased_before() -> None:
    # A <- B <- C on one key: B was erased (A stayed superseded: C was the answer), now C is
    a = head("a", "superseded", superseded_by="b")
    b = head("b", "erased", superseded_by="c", sealed_content=None)
    (r,) = reinstatements({"c": head("c")}, [a, b], NOW)
    assert (r.head.memory_id, r.replacement) == ("a", "c")


def test_versions_erased_by_the_same_request_are_walked_past() -> None:
    a = head("a", "superseded", superseded_by="b")
    b = head("b", "superseded", superseded_by="c")
    (r,) = reinstatements({"c": head("c"), "b": b}, [a, b], NOW)
    assert (r.head.memory_id, r.replacement) == ("a", "c")


@pytest.mark.parametrize(
    ("middle", "reinstated"),
    [
        (head("b", "superseded", superseded_by="c"), ["b"]),  # the nearest version is b itself
        (head("b", "revoked", superseded_by="c", sealed_content=None), []),  # b, not erased, ends the walk
        (head("b", "superseded", superseded_by="c", expires_at=NOW), []),  # b, expired, ends it too
    ],
)
def test_a_version_not_erased_between_ends_the_walk(middle: MemoryHead, reinstated: list[str]) -> None:
    a = head("a", "superseded", superseded_by="b")
    assert [r.head.memory_id for r in reinstatements({"c": head("c")}, [a, middle], NOW)] == reinstated


def test_a_chain_whose_last_erased_version_was_not_live_reinstates_nothing() -> None:
    a = head("a", "superseded", superseded_by="b")
    b = head("b", "erased", superseded_by="c", sealed_content=None)
    assert reinstatements({"c": head("c", "revoked")}, [a, b], NOW) == []
    looped = head("b", "erased", superseded_by="a", sealed_content=None)  # a broken link ends the walk too
    assert reinstatements({"c": head("c")}, [a, looped], NOW) == []


# -- earlier versions: the chains, and the memories of the slot left before ------------------

# memory ids in the ledger's order (UUIDv7s sort by the time the ledger made them)
A, B, C, D = ("0190-a", "0190-b", "0190-c", "0190-d")


@pytest.mark.parametrize(
    ("older", "why"),
    [
        (head(A, "revoked"), "revoked, its keys kept by a consent grace period"),
        (head(A, "active", expires_at=NOW - timedelta(seconds=1)), "past its expires_at, not swept yet"),
        (head(A, "needs_confirmation", expires_at=NOW), "expired at now"),
        (head(A, "superseded", superseded_by="0190-gone"), "superseded by a memory that is not live any more"),
    ],
)
def test_a_memory_of_the_slot_left_before_that_holds_content_is_an_earlier_version(older: MemoryHead, why: str) -> None:
    assert earlier_of([head(C)], [older], NOW) == [A], why


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (head(A, "active"), "a live claim of the slot is a rival, not a version"),
        (head(A, "needs_confirmation"), "a live claim of the slot is a rival, not a version"),
        (head(D, "revoked"), "recorded after the named memory"),
        (head(A, "revoked", sealed_content=None), "holds no content"),
        (head(A, "expired", sealed_content=None), "holds no content"),
        (head(A, "erased", key=None, scope_id=None, sealed_content=None), "erased"),
        (head(A, "revoked", key="seat"), "another key"),
        (head(A, "revoked", purpose="other"), "another purpose"),
        (head(A, "revoked", scope_type="document", scope_id="doc-1"), "another scope"),
        (head(A, "revoked", subject_id="bob"), "another subject"),
        (head(A, "revoked", kind="summary", key=None), "a summary has no slot"),
    ],
)
def test_other_memories_are_not_earlier_versions(other: MemoryHead, why: str) -> None:
    assert earlier_of([head(C)], [other], NOW) == [], why


def test_the_history_of_a_live_rival_is_the_rivals() -> None:
    rival = head(B, "needs_confirmation")  # in conflict with C
    of_the_rival = head(A, "superseded", superseded_by=B)
    assert earlier_of([head(C, "needs_confirmation")], [of_the_rival, rival], NOW) == []
    gone = head(B, "revoked", sealed_content=None)  # its replacement is not live any more: it is C's too
    assert earlier_of([head(C)], [of_the_rival, gone], NOW) == [A]


def test_a_keyless_memory_has_no_slot_only_its_chain() -> None:
    linked = head(A, "superseded", superseded_by=C, key=None)
    assert earlier_of([head(C, key=None)], [linked, head(B, "revoked", key=None)], NOW) == [A]


def test_the_chains_of_the_versions_left_in_the_slot_are_followed_and_their_slots_too() -> None:
    # B (key "old-employer") superseded A (key "employer": a supersession may change the
    # key), then B was revoked (its keys kept) and C written for B's key: B is left in C's
    # slot, A is in B's chain, and the revoked memory of A's slot recorded before A is too
    a = head(A, "superseded", superseded_by=B, key="employer")
    b = head(B, "revoked", key="old-employer")
    older_in_a_slot = head("0190-0", "revoked", key="employer")
    c = head(C, key="old-employer")
    assert earlier_of([c], [a, b, older_in_a_slot], NOW) == ["0190-0", A, B]


def test_a_chain_counts_whatever_the_status_and_the_named_are_left_out() -> None:
    a = head(A, "expired", superseded_by=B, sealed_content=None)
    b = head(B, "superseded", superseded_by=C)
    assert earlier_of([head(C)], [a, b], NOW) == [A, B]
    assert earlier_of([head(C), b], [a, b], NOW) == [A]
    loop = [head(A, "superseded", superseded_by=B, key=None), head(B, "superseded", superseded_by=A, key=None)]
    assert earlier_of([head(C, key=None)], loop, NOW) == []  # a loop that does not reach C ends


# -- rivals: the claim left alone in its slot when the erasure takes its dispute --------------


def test_the_claim_left_alone_by_the_erasure_of_its_rival_is_reinstated() -> None:
    erased = head(A, "needs_confirmation")
    left = head(B, "needs_confirmation")
    (r,) = rivals_left({A: erased}, [erased, left], NOW)
    assert (r.head.memory_id, r.rival) == (B, A)
    assert [(r.head.memory_id, r.rival) for r in rivals_left({A: erased}, [left], NOW)] == [(B, A)]


def test_two_rivals_erased_at_once_leave_the_third_reinstated_naming_the_first() -> None:
    a, b, c = (head(m, "needs_confirmation") for m in (A, B, C))
    assert [(r.head.memory_id, r.rival) for r in rivals_left({B: b, A: a}, [a, b, c], NOW)] == [(C, A)]


@pytest.mark.parametrize(
    ("erased", "claims", "why"),
    [
        (head(A, "needs_confirmation"), [head(B, "needs_confirmation"), head(C, "needs_confirmation")], "still open"),
        (head(A, "needs_confirmation"), [], "no claim left"),
        (head(A, "needs_confirmation"), [head(B, "active")], "the claim left is not awaiting confirmation"),
        (head(A, "needs_confirmation"), [head(B, "needs_confirmation", sealed_content=None)], "no content"),
        (head(A, "needs_confirmation"), [head(B, "needs_confirmation", expires_at=NOW)], "expired at now"),
        (head(A, "needs_confirmation"), [head(B, "needs_confirmation", key="seat")], "another slot"),
        (head(A, "superseded", superseded_by=C), [head(B, "needs_confirmation")], "the erased one was not live"),
        (head(A, "revoked"), [head(B, "needs_confirmation")], "the erased one was not live"),
        (head(A, "needs_confirmation", expires_at=NOW), [head(B, "needs_confirmation")], "erased one expired"),
        (head(A, "needs_confirmation", key=None), [head(B, "needs_confirmation", key=None)], "no key, no slot"),
        (head(A, "needs_confirmation", kind="summary"), [head(B, "needs_confirmation")], "a summary has no slot"),
    ],
)
def test_no_claim_is_reinstated_otherwise(erased: MemoryHead, claims: list[MemoryHead], why: str) -> None:
    assert rivals_left({erased.memory_id: erased}, [erased, *claims], NOW) == [], why


def test_the_claims_erased_by_the_same_request_are_not_left() -> None:
    a, b = head(A, "needs_confirmation"), head(B, "needs_confirmation")
    assert rivals_left({A: a, B: b}, [a, b], NOW) == []
