"""The direct voices: full-text search and vector similarity, each over the memories
recall may return (and, for full text, over summaries too, when they are asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from projections.ranking.candidates import Signals
from projections.ranking.port import Ranking, ranked

__all__ = ["FullTextRanker", "VectorRanker"]


@dataclass(frozen=True)
class FullTextRanker:
    """Full-text search (``fts``; BM25 over PostgreSQL's ``english`` lexemes by default,
    see :mod:`projections.recall_queries`). With ``include_summaries`` a second ranking,
    ``summary_fts``, ranks the summaries that matched."""

    include_summaries: bool = True
    name: str = "fts"
    needs_anchors: bool = False

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        out = [ranked("fts", signals.fts)]
        if self.include_summaries:
            out.append(ranked("summary_fts", signals.summaries))
        return out


@dataclass(frozen=True)
class VectorRanker:
    """Cosine similarity of the query's embedding to the memories' (``vector``), as the
    vector index ranked them."""

    name: str = "vector"
    needs_anchors: bool = False

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        return [ranked("vector", signals.vector)]
