"""Shaping without stores: recency as a Weibull survival of age per kind, importance
from confidence and confirmation, maximal marginal relevance, the token budget, and the
configuration's checks."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from projections.errors import RecallError
from projections.ranking.budget import within_budget
from projections.ranking.config import RANKER_NAMES, RankingConfig
from projections.ranking.mmr import mmr
from projections.ranking.shaping import RECENCY, Weibull, importance, shaping_factor
from tests.builders import candidate, recall_item

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_weibull_survival_is_one_at_age_zero_and_one_over_e_at_its_scale() -> None:
    w = Weibull(scale_days=30.0, shape=0.5)
    assert w.survival(0.0) == 1.0
    assert w.survival(-5.0) == 1.0  # written "after" the time judged: no age
    assert w.survival(30.0) == pytest.approx(math.exp(-1))
    assert w.survival(120.0) == pytest.approx(math.exp(-2))  # (120 / 30) ** 0.5 = 2
    assert Weibull(10.0, 1.0).survival(20.0) == pytest.approx(math.exp(-2))  # shape 1: exponential


def test_a_task_state_goes_stale_far_sooner_than_a_fact() -> None:
    week = T + timedelta(days=7)
    task = RECENCY["task_state"].survival(7.0)
    fact = RECENCY["fact"].survival(7.0)
    assert task == pytest.approx(math.exp(-1)) and fact > 0.9
    old_task = shaping_factor(candidate("t", kind="task_state", written_at=T), week, 1.0, 0.0)
    old_fact = shaping_factor(candidate("f", kind="fact", written_at=T), week, 1.0, 0.0)
    assert old_task == pytest.approx(task) and old_fact == pytest.approx(fact)


def test_importance_is_the_noisy_or_of_confidence_and_confirmation() -> None:
    assert importance(candidate("a", confidence=0.6, confirmed=True)) == 1.0
    assert importance(candidate("b", confidence=0.6, confirmed=False)) == pytest.approx(0.6)
    factor = shaping_factor(candidate("b", confidence=0.6, confirmed=False, written_at=T), T, 0.0, 0.5)
    assert factor == pytest.approx(1 - 0.5 + 0.5 * 0.6)


def test_weights_of_zero_leave_the_score_alone() -> None:
    old = candidate("x", kind="task_state", written_at=T - timedelta(days=400), confidence=0.1, confirmed=False)
    assert shaping_factor(old, T, 0.0, 0.0) == 1.0


def test_mmr_passes_over_a_near_duplicate_and_lambda_one_keeps_the_order() -> None:
    cands = [candidate("a", score=1.0), candidate("a2", score=0.95), candidate("b", score=0.9)]
    vectors = {"a": [1.0, 0.0], "a2": [0.999, 0.0447], "b": [0.0, 1.0]}
    assert [c.memory_id for c in mmr(cands, vectors, 0.5, 10)] == ["a", "b", "a2"]
    assert [c.memory_id for c in mmr(cands, vectors, 1.0, 10)] == ["a", "a2", "b"]
    # a candidate without a vector is similar to nothing; beyond the pool the order is kept
    tail = [*cands, candidate("c", score=0.1)]
    assert [c.memory_id for c in mmr(tail, {"a": [1.0, 0.0]}, 0.5, 3)] == ["a", "a2", "b", "c"]


def test_the_budget_takes_the_best_items_that_fit_and_passes_over_the_rest() -> None:
    cost = {"a": 50, "b": 80, "c": 30, "d": 10}.__getitem__
    assert within_budget(["a", "b", "c", "d"], cost, k=10, max_tokens=95) == ["a", "c", "d"]
    assert within_budget(["a", "b", "c", "d"], cost, k=2, max_tokens=95) == ["a", "c"]
    assert within_budget(["a", "b", "c"], cost, k=2, max_tokens=None) == ["a", "b"]
    assert within_budget(["b"], cost, k=5, max_tokens=10) == []


def test_the_configuration_names_the_field_it_refuses() -> None:
    with pytest.raises(RecallError, match=r"ranking\.weights: unknown ranker"):
        RankingConfig(weights={"bm25": 1.0})
    with pytest.raises(RecallError, match=r"ranking\.weights: every weight"):
        RankingConfig(weights={"fts": -1.0})
    with pytest.raises(RecallError, match=r"ranking\.mmr_lambda: must be between 0 and 1"):
        RankingConfig(mmr_lambda=1.5)
    with pytest.raises(RecallError, match=r"ranking\.depth"):
        RankingConfig(depth=0)
    with pytest.raises(RecallError, match=r"ranking\.fts_scoring"):
        RankingConfig(fts_scoring="tf-idf")  # type: ignore[arg-type]


def test_only_and_without_switch_rankers_and_keep_their_weights() -> None:
    config = RankingConfig()
    assert config.enabled() == RANKER_NAMES
    assert config.only("lineage").enabled() == ("lineage",)
    assert config.only("lineage").weight("lineage") == config.weight("lineage")
    assert "vector" not in config.without("vector").enabled()
    assert RankingConfig(weights={"fts": 0.0, "vector": 1.0}).enabled() == ("vector",)
    assert config.fingerprint()["weights"] == dict(sorted(config.weights.items()))


def test_a_better_item_too_long_with_what_it_carries_is_taken_smaller_before_a_worse_one() -> None:
    cost = {"a": 50, "a'": 20, "b": 30}.__getitem__
    smaller = {"a": "a'"}.get
    assert within_budget(["a", "b"], cost, k=10, max_tokens=40, shrink=lambda i, left: smaller(i)) == ["a'"]
    assert within_budget(["a", "b"], cost, k=10, max_tokens=60, shrink=lambda i, left: smaller(i)) == ["a"]


def test_a_summary_keeps_the_grouped_sources_that_fit_or_gives_its_place_to_its_best_source() -> None:
    from projections.recall import _shrunk

    sources = [recall_item("s1", tokens=17), recall_item("s2", tokens=40), recall_item("s3", tokens=10)]
    summary = recall_item("sum", kind="summary", tokens=146, grouped=sources)
    fit = _shrunk(summary, 180)
    assert fit is not None and fit.memory_id == "sum" and [s.memory_id for s in fit.grouped] == ["s1", "s3"]
    alone = _shrunk(summary, 60)
    assert alone is not None and alone.memory_id == "s1" and alone.grouped == []
    assert _shrunk(summary, 5) is None
