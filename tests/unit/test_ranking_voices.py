"""The voices of recall without stores: each ranker turns signals into rankings, and
weighted reciprocal rank fusion combines them."""

from __future__ import annotations

import pytest

from projections.ranking.candidates import Neighbour, Signals
from projections.ranking.direct import FullTextRanker, VectorRanker
from projections.ranking.fusion import fuse, fused_order
from projections.ranking.lineage import LineageRanker
from projections.ranking.neighbours import NeighboursRanker
from projections.ranking.port import Ranking, lift, ranked
from projections.ranking.sessions import SessionsRanker
from tests.builders import candidate


def test_weighted_rrf_sums_weight_over_rrf_k_plus_rank_and_names_the_rankings() -> None:
    a = Ranking("fts", [("x", 1), ("y", 2)])
    b = Ranking("vector", [("y", 1)])
    fused = fuse([(a, 1.0), (b, 2.0)], rrf_k=10)
    assert fused["x"] == (pytest.approx(1 / 11), ["fts"])
    assert fused["y"] == (pytest.approx(1 / 12 + 2 / 11), ["fts", "vector"])
    assert fused_order([(a, 1.0), (b, 2.0)], 10) == ["y", "x"]


def test_a_ranking_of_weight_zero_adds_nothing_and_ties_break_by_id() -> None:
    off = Ranking("vector", [("z", 1)])
    assert "z" not in fuse([(off, 0.0)], 60)
    assert fused_order([(Ranking("fts", [("b", 1), ("a", 1)]), 1.0)], 60) == ["a", "b"]
    with pytest.raises(ValueError, match="rrf_k"):
        fuse([], -1)
    with pytest.raises(ValueError, match="weight of fts"):
        fuse([(Ranking("fts", []), -1.0)], 60)


def test_lift_keeps_each_id_once_at_its_best_rank() -> None:
    lifted = lift("lineage", [(3, ["a", "b"]), (1, ["b"]), (2, ["c"])])
    assert lifted.ranks == [("b", 1), ("c", 2), ("a", 3)]
    assert ranked("fts", ["a", "b", "a"]).ranks == [("a", 1), ("b", 2)]


def test_full_text_ranks_summaries_apart_only_when_they_are_asked_for() -> None:
    signals = Signals(fts=["m1", "m2"], summaries=["s1"])
    both = FullTextRanker(include_summaries=True).rank(signals, ())
    assert [(r.name, r.ids()) for r in both] == [("fts", ["m1", "m2"]), ("summary_fts", ["s1"])]
    assert [r.name for r in FullTextRanker(include_summaries=False).rank(signals, ())] == ["fts"]
    assert VectorRanker().rank(Signals(vector=["v"]), ())[0].ranks == [("v", 1)]


def test_lineage_lifts_the_sources_of_the_best_derived_memories_at_their_rank() -> None:
    rows = {
        "i1": candidate("i1", kind="inference", derived_from=["t1", "t2"]),
        "i2": candidate("i2", kind="inference", derived_from=["t2", "t3"]),
        "i3": candidate("i3", kind="inference", derived_from=["t9"]),
    }
    # i1 first in both rankings, i2 second in one: i1 rank 1, i2 rank 2, i3 cut by depth
    signals = Signals(fts_derived=["i1", "i2", "i3"], vector_derived=["i1"], rows=rows)
    (lifted,) = LineageRanker(depth=2, rrf_k=10).rank(signals, ())
    assert lifted.name == "lineage"
    assert lifted.ranks == [("t1", 1), ("t2", 1), ("t3", 2)]  # t2 counted once, at i1's rank


def test_lineage_reads_provisional_rows_and_skips_seeds_without_one() -> None:
    signals = Signals(
        vector_derived=["gone", "i1"],
        provisional={"i1": candidate("i1", kind="inference", derived_from=["t1"])},
    )
    assert LineageRanker(depth=5).rank(signals, ())[0].ranks == [("t1", 2)]


def test_sessions_lift_the_sources_of_the_best_summaries() -> None:
    rows = {
        "s1": candidate("s1", kind="summary", derived_from=["a", "b"]),
        "s2": candidate("s2", kind="summary", derived_from=["b", "c"]),
        "s3": candidate("s3", kind="summary", derived_from=["d"]),
    }
    (lifted,) = SessionsRanker(depth=2).rank(Signals(summaries=["s1", "s2", "s3"], rows=rows), ())
    assert lifted.ranks == [("a", 1), ("b", 1), ("c", 2)]


def test_neighbours_take_the_anchor_rank_plus_their_distance_minus_one() -> None:
    near = [
        Neighbour("a1", "n1", 1),
        Neighbour("a1", "n2", 2),
        Neighbour("a2", "n1", 1),  # next to both anchors: the better rank
        Neighbour("a2", "far", 3),  # beyond the width
        Neighbour("unknown", "x", 1),  # not an anchor
        Neighbour("a2", "a1", 1),  # an anchor next to another one is lifted too
    ]
    (lifted,) = NeighboursRanker(width=2).rank(Signals(neighbours=near), ["a1", "a2"])
    assert lifted.ranks == [("n1", 1), ("a1", 2), ("n2", 2)]
    assert NeighboursRanker().rank(Signals(neighbours=near), [])[0].ranks == []
