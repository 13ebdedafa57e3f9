"""The comparison half of ``verify`` without I/O: rows and points on one side only,
differing columns and payload fields, vectors by cosine, and values rendered without
memory text."""

from __future__ import annotations

import hashlib

from projections.vector_index import VectorPoint
from projections.verify import (
    VECTOR_COSINE_MIN,
    Difference,
    TableSpec,
    VerifyReport,
    compare_points,
    compare_rows,
    cosine,
)

SPEC = TableSpec("facts_v1", ("memory_id",))


def row(memory_id: str, **fields: object) -> dict[str, object]:
    return {"memory_id": memory_id, "subject_id": "alice", "status": "active", "content": "x", **fields}


def test_compare_rows_reports_missing_rows_and_each_differing_column() -> None:
    live = {"a": row("a"), "b": row("b", status="revoked", content="secret"), "c": row("c")}
    fold = {"a": row("a"), "b": row("b"), "d": row("d")}
    digest = hashlib.sha256(b"secret").hexdigest()[:12]
    assert compare_rows("facts_v1", live, fold, SPEC) == [
        Difference("facts_v1", "alice", "b", "b", "content", f"sha256:{digest} (6 chars)", compare_fp("x")),
        Difference("facts_v1", "alice", "b", "b", "status", "revoked", "active"),
        Difference("facts_v1", "alice", "c", "c", "(row)", "present", None),
        Difference("facts_v1", "alice", "d", "d", "(row)", None, "present"),
    ]
    assert compare_rows("facts_v1", live, dict(live), SPEC) == []


def compare_fp(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]} ({len(text)} chars)"


def point(memory_id: str, vector: tuple[float, ...] = (1.0, 0.0), **payload: object) -> VectorPoint:
    return VectorPoint(memory_id, vector, {"subject_id": "alice", "revision": 1, **payload})


def test_compare_points_checks_payloads_of_differing_subjects_and_every_vector() -> None:
    live = {"a": point("a"), "b": point("b", revision=3), "c": point("c", (0.0, 1.0)), "e": point("e")}
    fold = {"a": point("a"), "b": point("b", revision=2), "c": point("c"), "d": point("d")}
    differing, found = compare_points("memories_v1", live, fold)
    assert differing == {"alice"}
    assert found == [
        Difference("memories_v1", "alice", "b", "b", "revision", "3", "2"),
        Difference("memories_v1", "alice", "c", "c", "vector", "cosine 0.000000", "reference"),
        Difference("memories_v1", "alice", "d", "d", "(row)", None, "present"),
        Difference("memories_v1", "alice", "e", "e", "(row)", "present", None),
    ]
    assert compare_points("memories_v1", fold, dict(fold)) == (set(), [])


def test_cosine_and_its_threshold() -> None:
    assert cosine((1.0, 0.0), (2.0, 0.0)) == 1.0
    assert cosine((1.0, 0.0), (0.0, 0.0)) == 0.0 and cosine((1.0,), (1.0, 0.0)) == 0.0
    assert cosine((1.0, 0.001), (1.0, 0.0)) >= VECTOR_COSINE_MIN


def test_report_is_ok_without_differences_and_pending_does_not_fail_it() -> None:
    report = VerifyReport("facts_v1", {0: 9})
    pending = Difference("facts_v1", "alice", "a", "a", "(row)", "present", None)
    report.pending.append(pending)
    assert report.ok and report.to_dict()["pending"] == [pending.to_dict()]
    assert "pending facts_v1 subject alice a (row)" in report.render()
    report.differences.append(pending)
    assert not report.ok and "DIFF facts_v1 subject alice a (row): live present | fold None" in report.render()
