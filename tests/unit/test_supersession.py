"""The rule for an erased memory's earlier versions (no I/O): which are reinstated."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from contracts import SealedText, utc_now
from ledger.state import MemoryHead
from ledger.supersession import holding_content, reinstatements

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
