"""The configurations an evaluation measures: each ranker alone, the fusion, the fusion
without each ranker and without each shaping step (ablations), and the full-text
scorings (``bm25``, ``ts_rank``, ``ts_rank_cd``) alone."""

from __future__ import annotations

from dataclasses import dataclass, replace

from projections.ranking.config import FTS_SCORINGS, RankingConfig

__all__ = ["SHAPING_STEPS", "Variant", "variants"]

SHAPING_STEPS = ("recency", "importance", "mmr")
"""Shaping steps an ablation can turn off."""


@dataclass(frozen=True)
class Variant:
    """One configuration of recall to measure: ``group`` is ``alone``, ``fusion``,
    ``ablation`` or ``fts scoring``."""

    name: str
    group: str
    ranking: RankingConfig


def _without_step(config: RankingConfig, step: str) -> RankingConfig:
    if step == "recency":
        return replace(config, recency_weight=0.0)
    if step == "importance":
        return replace(config, importance_weight=0.0)
    return replace(config, mmr_lambda=1.0)


def variants(config: RankingConfig, ablations: bool = True) -> list[Variant]:
    """The fusion of ``config`` first, then each of its rankers alone, then (with
    ``ablations``) the fusion without each ranker and without each shaping step that is
    on, then full-text search alone with each scoring."""
    enabled = config.enabled()
    out = [Variant("fusion", "fusion", config)]
    out += [Variant(f"{name} alone", "alone", config.only(name)) for name in enabled]
    if ablations:
        if len(enabled) > 1:
            out += [Variant(f"fusion without {name}", "ablation", config.without(name)) for name in enabled]
        on = {
            "recency": config.recency_weight > 0,
            "importance": config.importance_weight > 0,
            "mmr": config.mmr_lambda < 1.0,
        }
        out += [
            Variant(f"fusion without {step}", "ablation", _without_step(config, step))
            for step in SHAPING_STEPS
            if on[step]
        ]
        out += [
            Variant(f"fts alone, {scoring}", "fts scoring", replace(config.only("fts"), fts_scoring=scoring))
            for scoring in FTS_SCORINGS
            if scoring != config.fts_scoring
        ]
    return out
