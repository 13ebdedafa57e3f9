"""Weighted reciprocal rank fusion.

``score(m) = sum over rankings r of w_r / (rrf_k + rank_r(m))``, rank from 1: reciprocal
rank fusion (Cormack, Clarke and Buettcher, "Reciprocal Rank Fusion outperforms Condorcet
and individual Rank Learning Methods", SIGIR 2009), with a weight per ranking as in
weighted RRF (e.g. Elasticsearch's and Vespa's). Cormack et al. used ``rrf_k = 60`` for
fusing many runs of 1,000 results; with a few rankers of some tens of candidates a
smaller constant lets the first places count more (recall's default, 10, measured best
on the development conversations).
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.ranking.port import Ranking

__all__ = ["fuse", "fused_order"]


def fuse(rankings: Sequence[tuple[Ranking, float]], rrf_k: int) -> dict[str, tuple[float, list[str]]]:
    """Fuse ``(ranking, weight)`` pairs: memory id -> (score, names of the rankings that
    ranked it, in the order given). Rankings with weight 0 are skipped.

    Raises:
        ValueError: ``rrf_k`` < 0 or a weight < 0.
    """
    if rrf_k < 0:
        raise ValueError(f"rrf_k: must be >= 0, got {rrf_k}")
    out: dict[str, tuple[float, list[str]]] = {}
    for ranking, weight in rankings:
        if weight < 0:
            raise ValueError(f"weight of {ranking.name}: must be >= 0, got {weight}")
        if weight == 0:
            continue
        for memory_id, rank in ranking.ranks:
            score, names = out.get(memory_id, (0.0, []))
            out[memory_id] = (score + weight / (rrf_k + rank), [*names, ranking.name])
    return out


def fused_order(rankings: Sequence[tuple[Ranking, float]], rrf_k: int) -> list[str]:
    """The ids of :func:`fuse`, best score first (ties by id, so the order is stable)."""
    fused = fuse(rankings, rrf_k)
    return sorted(fused, key=lambda m: (-fused[m][0], m))
