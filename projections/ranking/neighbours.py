"""The neighbouring-turns voice: a strongly matched memory lifts the memories recorded
next to it in the same source.

In a conversation the answer to a question is often the turn after the one that
matches it (or the one before); in a document, the next paragraph. The anchors are the
best candidates of the first stage's fusion; each memory within ``width`` places of an
anchor in the anchor's source (the same ``source_ref``, in the order the ledger recorded
them) gets rank ``anchor rank + distance - 1``, so the neighbour right after the best
anchor shares its rank. A memory next to several anchors keeps its best rank; an anchor
next to another anchor is lifted by it too (two matching turns in a row support each
other).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from projections.ranking.candidates import Signals
from projections.ranking.port import Ranking, lift

__all__ = ["NeighboursRanker"]


@dataclass(frozen=True)
class NeighboursRanker:
    """Lifts the memories within ``width`` places of each anchor, in its source."""

    width: int = 2
    name: str = "neighbours"
    needs_anchors: bool = True

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        place = {m: n for n, m in enumerate(anchors, start=1)}
        groups = [
            (place[nb.anchor] + nb.distance - 1, [nb.memory_id])
            for nb in signals.neighbours
            if nb.anchor in place and 1 <= nb.distance <= self.width
        ]
        return [lift(self.name, groups)]
