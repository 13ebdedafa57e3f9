"""The order in which recall ranks (no I/O; :class:`projections.recall.Recall` fetches):

1. first stage: every enabled ranker without anchors (full text, vectors, lineage,
   sessions) on the signals, fused by weighted RRF;
2. the anchors: the best ``neighbour_anchors`` of that fusion;
3. second stage: the rankers that need anchors (neighbours), fused with the first;
4. shaping: each score times its recency and importance factor; only candidates recall
   may return are kept;
5. one answer per key (:func:`projections.evidence.one_per_key`);
6. maximal marginal relevance over the best ``mmr_pool`` (:mod:`projections.ranking.mmr`);
7. summaries grouped with their recalled sources
   (:func:`projections.evidence.group_summaries`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from projections.evidence import group_summaries, one_per_key
from projections.ranking.candidates import Candidate, Signals
from projections.ranking.config import RankingConfig
from projections.ranking.direct import FullTextRanker, VectorRanker
from projections.ranking.fusion import fuse
from projections.ranking.lineage import LineageRanker
from projections.ranking.mmr import mmr
from projections.ranking.neighbours import NeighboursRanker
from projections.ranking.port import Ranker, Ranking
from projections.ranking.sessions import SessionsRanker
from projections.ranking.shaping import shaping_factor

__all__ = ["FirstStage", "build_rankers", "finish", "first_stage", "shaped"]


def build_rankers(config: RankingConfig, include_summaries: bool) -> list[Ranker]:
    """The enabled rankers of ``config``, in fusion order."""
    every: dict[str, Ranker] = {
        "fts": FullTextRanker(include_summaries=include_summaries),
        "vector": VectorRanker(),
        "lineage": LineageRanker(depth=config.lineage_depth, rrf_k=config.rrf_k),
        "sessions": SessionsRanker(depth=config.sessions_depth),
        "neighbours": NeighboursRanker(width=config.neighbour_width),
    }
    return [every[name] for name in config.enabled()]


def _rankings(
    rankers: Sequence[Ranker], signals: Signals, config: RankingConfig, anchored: Sequence[str] | None
) -> list[tuple[Ranking, float]]:
    stage = [r for r in rankers if r.needs_anchors == (anchored is not None)]
    return [(ranking, config.weight(r.name)) for r in stage for ranking in r.rank(signals, anchored or ())]


@dataclass(frozen=True)
class FirstStage:
    """The first stage on signals not all checked yet: ``unchecked``, the ids it ranks
    (and the derived memories it read) that have no checked row; ``anchors``, its best
    ``neighbour_anchors`` ids ([] when no enabled ranker needs anchors; the facts table
    checks them with the rest)."""

    unchecked: list[str]
    anchors: list[str]


def first_stage(signals: Signals, rankers: Sequence[Ranker], config: RankingConfig) -> FirstStage:
    """Steps 1-2 on signals whose vector side is still provisional (see :class:`FirstStage`).
    With no first-stage ranker enabled (a second-stage ranker measured alone) the anchors
    are full-text search's best."""
    fused = fuse(_rankings(rankers, signals, config, None), config.rrf_k)
    seeds = list(signals.vector_derived) if any(r.name == "lineage" for r in rankers) else []
    unchecked = [m for m in dict.fromkeys([*fused, *seeds]) if m not in signals.rows]
    if not any(r.needs_anchors for r in rankers):
        return FirstStage(unchecked, [])
    order = sorted(fused, key=lambda m: (-fused[m][0], m)) if fused else list(signals.fts)
    return FirstStage(unchecked, order[: config.neighbour_anchors])


def shaped(
    signals: Signals,
    rankers: Sequence[Ranker],
    config: RankingConfig,
    anchored: Sequence[str],
    at: datetime,
    returnable: Collection[str],
    include_summaries: bool,
    limit: int | None = None,
) -> list[Candidate]:
    """Steps 1-4: the candidates recall may return (checked rows whose status is in
    ``returnable``; summaries only with ``include_summaries``), with their shaped scores
    and ``matched_by``, best first (ties by id), at most ``limit`` of them. ``at``: the
    time judged (aware UTC)."""
    first = _rankings(rankers, signals, config, None)
    second = _rankings(rankers, signals, config, anchored) if anchored else []
    fused = fuse(first + second, config.rrf_k)
    scores: dict[str, float] = {}
    for memory_id, (score, _) in fused.items():
        row = signals.rows.get(memory_id)
        if row is None or row.status not in returnable or (row.kind == "summary" and not include_summaries):
            continue
        scores[memory_id] = score * shaping_factor(row, at, config.recency_weight, config.importance_weight)
    best = sorted(scores, key=lambda m: (-scores[m], m))[:limit]
    return [signals.rows[m].ranked(scores[m], fused[m][1]) for m in best]


def finish(
    candidates: Sequence[Candidate], vectors: Mapping[str, Sequence[float]], config: RankingConfig
) -> list[Candidate]:
    """Steps 5-7 on :func:`shaped`'s output: one answer per key, MMR (``vectors``: memory
    id -> embedding, for the MMR pool), summaries grouped with their sources."""
    answered = one_per_key(candidates)
    diverse = mmr(answered, vectors, config.mmr_lambda, config.mmr_pool)
    return group_summaries(diverse)
