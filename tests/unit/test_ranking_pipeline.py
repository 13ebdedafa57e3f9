"""The order recall ranks in, without stores: the first stage names what the facts table
must check and picks the anchors, the shaped fusion keeps only what may be returned, and
the finish keeps one answer per key and groups a summary with its sources."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from projections.ranking.candidates import Neighbour, Signals
from projections.ranking.config import RankingConfig
from projections.ranking.pipeline import build_rankers, finish, first_stage, shaped
from tests.builders import candidate

T = datetime(2026, 1, 1, tzinfo=UTC)
PLAIN = RankingConfig(recency_weight=0.0, importance_weight=0.0, mmr_lambda=1.0, rrf_k=10)


def test_the_first_stage_names_unchecked_ids_and_the_anchors() -> None:
    rows = {"f1": candidate("f1"), "i1": candidate("i1", kind="inference", derived_from=["t1"])}
    signals = Signals(
        fts=["f1"],
        fts_derived=["i1"],
        vector=["v1"],
        vector_derived=["i2"],
        rows=rows,
        provisional={"i2": candidate("i2", kind="inference", derived_from=["t2"])},
    )
    rankers = build_rankers(PLAIN, include_summaries=False)
    first = first_stage(signals, rankers, replace(PLAIN, neighbour_anchors=2))
    assert set(first.unchecked) == {"v1", "t1", "t2", "i2"}  # f1 and i1 came checked from full text
    assert len(first.anchors) == 2 and first.anchors[0] in {"f1", "t1", "t2", "v1"}


def test_a_second_stage_ranker_alone_anchors_on_full_text() -> None:
    config = replace(PLAIN.only("neighbours"), neighbour_anchors=2)
    first = first_stage(Signals(fts=["a", "b", "c"]), build_rankers(config, False), config)
    assert first.anchors == ["a", "b"] and first.unchecked == []


def test_shaped_keeps_what_may_be_returned_with_scores_and_the_rankings_that_found_it() -> None:
    rows = {
        "a": candidate("a"),
        "u": candidate("u", status="needs_confirmation"),
        "s": candidate("s", kind="summary"),
        "n": candidate("n", source_ref="doc"),
    }
    signals = Signals(fts=["a", "u", "s"], vector=["a"], rows=rows, neighbours=[Neighbour("a", "n", 1)])
    rankers = build_rankers(PLAIN, include_summaries=False)
    out = shaped(signals, rankers, PLAIN, ["a"], T, ["active"], include_summaries=False)
    assert [c.memory_id for c in out] == ["a", "n"]  # not the unconfirmed one, nor the summary
    assert out[0].matched_by == ["fts", "vector"] and out[1].matched_by == ["neighbours"]
    assert out[0].score == pytest.approx(1 / 11 + 1 / 11) and out[1].score == pytest.approx(0.5 / 11)
    with_all = shaped(signals, rankers, PLAIN, ["a"], T, ["active", "needs_confirmation"], include_summaries=True)
    assert {c.memory_id for c in with_all} == {"a", "u", "s", "n"}


def test_shaping_lowers_a_stale_task_state_below_a_fresh_one() -> None:
    old = candidate("old", kind="task_state", written_at=datetime(2025, 12, 1, tzinfo=UTC))
    new = candidate("new", kind="task_state", written_at=datetime(2025, 12, 31, tzinfo=UTC))
    signals = Signals(fts=["old", "new"], rows={"old": old, "new": new})
    config = replace(PLAIN, recency_weight=1.0)
    out = shaped(signals, build_rankers(config, False), config, [], T, ["active"], False)
    assert [c.memory_id for c in out] == ["new", "old"]
    unshaped = shaped(signals, build_rankers(PLAIN, False), PLAIN, [], T, ["active"], False)
    assert [c.memory_id for c in unshaped] == ["old", "new"]


def test_finish_keeps_one_answer_per_key_and_groups_a_summary_with_its_sources() -> None:
    ranked = [
        candidate("a", key="lang", score=0.9),
        candidate("b", key="lang", score=0.8),
        candidate("s", kind="summary", derived_from=["c"], score=0.5),
        candidate("c", score=0.7),
    ]
    out = finish(ranked, {}, PLAIN)
    assert [c.memory_id for c in out] == ["a", "s"]
    assert [g.memory_id for g in out[1].grouped] == ["c"] and out[1].score == 0.7
