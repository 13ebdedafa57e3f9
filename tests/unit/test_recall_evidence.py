"""Recall's evidence rules without stores: one active answer per key, and a summary
grouped with its recalled sources as one piece of evidence (DESIGN.md, invariant 4)."""

from __future__ import annotations

from typing import Any

from projections.evidence import RecallItem, group_summaries, one_per_key
from tests.builders import recall_item


def item(memory_id: str, score: float, kind: str = "fact", **fields: Any) -> RecallItem:
    return recall_item(memory_id, score, kind=kind, content=memory_id, **fields)


def test_one_per_key_keeps_the_best_ranked_active_memory() -> None:
    items = [
        item("a", 0.9, key="lang"),
        item("b", 0.8, key="lang"),
        item("c", 0.7, key="lang", status="needs_confirmation"),
        item("d", 0.6),
        item("e", 0.5),
        item("s", 0.4, kind="summary", key="lang"),
    ]
    assert [i.memory_id for i in one_per_key(items)] == ["a", "c", "d", "e", "s"]


def test_the_most_specific_scope_answers_a_key_at_its_own_rank() -> None:
    wide = item("wide", 0.032, key="units")
    other = item("other", 0.020)
    workspace = item("ws", 0.016, key="units", scope={"type": "workspace", "id": "W9"})
    out = one_per_key([wide, other, workspace, item("last", 0.010)])
    assert [i.memory_id for i in out] == ["other", "ws", "last"]
    assert [i.score for i in out] == sorted((i.score for i in out), reverse=True)  # the order is the scores'


def test_a_summary_takes_the_best_place_of_its_group_and_its_sources_leave_the_top_level() -> None:
    items = [
        item("a", 0.9),
        item("x", 0.8),
        item("b", 0.7),
        item("s", 0.3, kind="summary", derived_from=["a", "b", "gone"]),
    ]
    top = group_summaries(items)
    assert [i.memory_id for i in top] == ["s", "x"]
    assert [g.memory_id for g in top[0].grouped] == ["a", "b"] and top[0].score == 0.9


def test_a_source_belongs_to_one_group_only_and_a_summary_without_recalled_sources_stands_alone() -> None:
    items = [
        item("s1", 0.9, kind="summary", derived_from=["a"]),
        item("a", 0.8),
        item("s2", 0.7, kind="summary", derived_from=["a", "b"]),
        item("s3", 0.2, kind="summary", derived_from=["zzz"]),
    ]
    top = group_summaries(items)
    assert [i.memory_id for i in top] == ["s1", "s2", "s3"]
    assert [g.memory_id for g in top[0].grouped] == ["a"] and top[1].grouped == [] and top[2].grouped == []
    assert top[1].score == 0.7


def test_no_summaries_changes_nothing() -> None:
    items = [item("a", 0.9), item("b", 0.8)]
    assert group_summaries(items) == items
