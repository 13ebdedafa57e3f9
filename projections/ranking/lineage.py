"""The lineage voice: a derived memory (an inference) that matches the query lifts the
memories it was derived from.

The ledger records lineage (``provenance.derived_from``) for every inference; an
inference restates what its sources say in other words, so a question that matches the
inference is evidence for its sources. The derived memories are ranked by reciprocal
rank fusion of their own full-text and vector rankings (equal weights, the fusion's
``rrf_k``); the best ``depth`` of them give each of their sources their rank. A source
lifted by several inferences keeps its best rank: one piece of evidence, not several.
Whether the inference itself is returned is decided by recall's rules, not here (an
unconfirmed one is not, unless asked for); only its sources are lifted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from projections.ranking.candidates import Signals
from projections.ranking.fusion import fused_order
from projections.ranking.port import Ranking, lift, ranked

__all__ = ["LineageRanker"]


@dataclass(frozen=True)
class LineageRanker:
    """Lifts the sources of the ``depth`` best-matching derived memories."""

    depth: int = 20
    rrf_k: int = 10
    name: str = "lineage"
    needs_anchors: bool = False

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        seeds = fused_order(
            [(ranked("fts", signals.fts_derived), 1.0), (ranked("vector", signals.vector_derived), 1.0)], self.rrf_k
        )
        groups = []
        for rank, seed in enumerate(seeds[: self.depth], start=1):
            row = signals.row(seed)
            if row is not None:
                groups.append((rank, row.derived_from))
        return [lift(self.name, groups)]
