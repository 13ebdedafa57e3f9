"""How recall ranks: which rankers are fused, with what weights, and the shaping steps.

Every default here is the value that measured best on the 8 LoCoMo development
conversations (``memledger eval recall``; README, "How recall ranks"), or, where several
values tied, the one with the plainer meaning. Nothing else was fitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final, Literal

from projections.errors import RecallError

__all__ = [
    "DEFAULT_WEIGHTS",
    "FTS_SCORINGS",
    "RANKER_NAMES",
    "FtsScoring",
    "RankingConfig",
]

RANKER_NAMES: Final = ("fts", "vector", "lineage", "sessions", "neighbours")
"""Every ranker recall knows, in the order their rankings are fused (``RecallItem.matched_by``)."""

FtsScoring = Literal["bm25", "ts_rank", "ts_rank_cd"]
FTS_SCORINGS: Final[tuple[FtsScoring, ...]] = ("bm25", "ts_rank", "ts_rank_cd")
"""How the full-text ranker scores a match: Okapi BM25 over PostgreSQL's ``english``
lexemes (the default), or PostgreSQL's own ``ts_rank`` / ``ts_rank_cd``."""

DEFAULT_WEIGHTS: Final[Mapping[str, float]] = MappingProxyType(
    {"fts": 1.0, "vector": 1.0, "lineage": 1.5, "sessions": 0.5, "neighbours": 0.5}
)
"""Weight of each ranker in the weighted reciprocal rank fusion (a ranker left out, or
given 0, is off)."""


def _frozen(weights: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(weights))


@dataclass(frozen=True)
class RankingConfig:
    """The ranking recall applies (see README, "How recall ranks", for the formulas).

    Attributes:
        weights: ranker name (one of :data:`RANKER_NAMES`) -> weight (>= 0) in the
            weighted reciprocal rank fusion; absent or 0 turns the ranker off.
        rrf_k: the constant of reciprocal rank fusion, ``w / (rrf_k + rank)``.
        fts_scoring: how the full-text ranker scores (:data:`FTS_SCORINGS`).
        bm25_k1, bm25_b: Okapi BM25's term-frequency saturation and length
            normalisation (Robertson and Zaragoza 2009's usual 1.2 and 0.75; not tuned).
        depth: candidates each direct ranker (full text, vectors) contributes.
        lineage_depth: derived memories (inferences) whose sources the lineage ranker lifts.
        sessions_depth: best-matching summaries whose sources the sessions ranker lifts.
        neighbour_anchors: best fused candidates whose neighbours are lifted.
        neighbour_width: how many memories on each side of an anchor, in its source.
        recency_weight: in [0, 1]; how much the Weibull survival of a memory's age
            scales its score (0: off).
        importance_weight: in [0, 1]; how much importance scales the score (0: off).
        mmr_lambda: in [0, 1]; maximal marginal relevance trade-off (1: off).
        mmr_pool: candidates MMR reorders (the rest keep their order after them).
    """

    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    rrf_k: int = 10
    fts_scoring: FtsScoring = "bm25"
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    depth: int = 50
    lineage_depth: int = 20
    sessions_depth: int = 3
    neighbour_anchors: int = 10
    neighbour_width: int = 2
    recency_weight: float = 0.5
    importance_weight: float = 0.5
    mmr_lambda: float = 0.9
    mmr_pool: int = 30

    def __post_init__(self) -> None:
        """Check every field.

        Raises:
            RecallError: naming the field (``ranking.<name>``) and the rule broken.
        """
        unknown = sorted(set(self.weights) - set(RANKER_NAMES))
        if unknown:
            raise RecallError("ranking.weights", f"unknown ranker(s) {unknown}; known: {', '.join(RANKER_NAMES)}")
        if any(not w >= 0 for w in self.weights.values()):
            raise RecallError("ranking.weights", "every weight must be a number >= 0")
        if self.fts_scoring not in FTS_SCORINGS:
            raise RecallError("ranking.fts_scoring", f"must be one of {', '.join(FTS_SCORINGS)}")
        for name in ("rrf_k", "neighbour_width"):
            if getattr(self, name) < 0:
                raise RecallError(f"ranking.{name}", "must be >= 0")
        for name in ("depth", "lineage_depth", "sessions_depth", "neighbour_anchors", "mmr_pool"):
            if getattr(self, name) < 1:
                raise RecallError(f"ranking.{name}", "must be >= 1")
        for name in ("recency_weight", "importance_weight", "mmr_lambda", "bm25_b"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise RecallError(f"ranking.{name}", "must be between 0 and 1")
        if not self.bm25_k1 >= 0:
            raise RecallError("ranking.bm25_k1", "must be >= 0")
        object.__setattr__(self, "weights", _frozen(self.weights))

    def weight(self, ranker: str) -> float:
        """The fusion weight of ``ranker`` (0 when it is off)."""
        return float(self.weights.get(ranker, 0.0))

    def enabled(self) -> tuple[str, ...]:
        """The rankers with a weight above 0, in :data:`RANKER_NAMES` order."""
        return tuple(n for n in RANKER_NAMES if self.weight(n) > 0)

    def only(self, *rankers: str) -> RankingConfig:
        """This configuration with only ``rankers`` on (each keeps its weight, or 1.0 if it had none)."""
        return replace(self, weights={n: self.weight(n) or 1.0 for n in rankers})

    def without(self, ranker: str) -> RankingConfig:
        """This configuration with ``ranker`` off."""
        return replace(self, weights={n: w for n, w in self.weights.items() if n != ranker})

    def fingerprint(self) -> dict[str, object]:
        """Every field as JSON-ready data (part of a cached result's key)."""
        return {
            "weights": dict(sorted(self.weights.items())),
            **{name: getattr(self, name) for name in self.__dataclass_fields__ if name != "weights"},
        }
