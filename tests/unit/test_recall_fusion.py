"""Reciprocal rank fusion: score(id) = sum over rankers of 1 / (k + rank), rank from 1."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.recall import rrf


def test_single_ranking_follows_one_over_k_plus_rank_from_one() -> None:
    scores = rrf([["a", "b", "c"]], k=60)
    assert scores == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 62), "c": pytest.approx(1 / 63)}
    assert scores["a"] > scores["b"] > scores["c"]


def test_default_k_is_60() -> None:
    assert rrf([["a"]]) == {"a": pytest.approx(1 / 61)}


@pytest.mark.parametrize("k", [0, 1, 10, 60, 1000])
def test_k_is_used(k: int) -> None:
    scores = rrf([["x", "y"]], k=k)
    assert scores["x"] == pytest.approx(1 / (k + 1))
    assert scores["y"] == pytest.approx(1 / (k + 2))


def test_scores_sum_across_rankers() -> None:
    scores = rrf([["a", "b", "c"], ["c", "a"], ["d"]], k=60)
    assert scores == {
        "a": pytest.approx(1 / 61 + 1 / 62),
        "b": pytest.approx(1 / 62),
        "c": pytest.approx(1 / 63 + 1 / 61),
        "d": pytest.approx(1 / 61),
    }
    # found by two rankers beats found by one, even at a worse rank
    assert scores["c"] > scores["d"]
    assert scores["a"] > scores["d"]


def test_consensus_beats_a_single_first_place() -> None:
    scores = rrf([["solo", "both"], ["other", "both"]], k=60)
    assert scores["both"] == pytest.approx(2 / 62)
    assert scores["both"] > scores["solo"] == pytest.approx(1 / 61)


def test_same_rank_in_different_rankers_ties() -> None:
    scores = rrf([["a", "x"], ["b", "y"]], k=60)
    assert scores["a"] == scores["b"] == pytest.approx(1 / 61)
    assert scores["x"] == scores["y"] == pytest.approx(1 / 62)


def test_mirrored_rankings_tie_exactly() -> None:
    scores = rrf([["a", "b"], ["b", "a"]], k=60)
    assert scores["a"] == scores["b"]
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)


def test_empty_input() -> None:
    assert rrf([]) == {}
    assert rrf([[]]) == {}
    assert rrf([[], []], k=5) == {}


def test_empty_ranker_contributes_nothing() -> None:
    assert rrf([["a", "b"], []], k=60) == rrf([["a", "b"]], k=60)


@settings(deadline=None)
@given(
    rankings=st.lists(
        st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10),
        max_size=5,
    ),
    k=st.integers(min_value=0, max_value=200),
)
def test_matches_the_formula(rankings: list[list[str]], k: int) -> None:
    scores = rrf(rankings, k=k)
    expected: dict[str, Fraction] = {}
    for ranking in rankings:
        for index, memory_id in enumerate(ranking):
            expected[memory_id] = expected.get(memory_id, Fraction(0)) + Fraction(1, k + index + 1)
    assert set(scores) == set(expected)
    for memory_id, score in scores.items():
        assert math.isclose(score, float(expected[memory_id]), rel_tol=1e-12)
        assert score > 0


@settings(deadline=None)
@given(
    rankings=st.lists(st.lists(st.sampled_from("abcdef"), unique=True, max_size=6), min_size=1, max_size=4),
)
def test_order_of_rankers_does_not_matter(rankings: list[list[str]]) -> None:
    forward = rrf(rankings)
    backward = rrf(list(reversed(rankings)))
    assert forward.keys() == backward.keys()
    for memory_id in forward:
        assert forward[memory_id] == pytest.approx(backward[memory_id])
