"""The sessions voice: the best-matching sessions, found by their summaries, lift their
memories.

A summary is derived from the memories of one session or source (LoCoMo: one per
conversation session); when its text matches the query, the session is likely to hold
the answer. The ``depth`` best summaries by full-text score give each of their sources
the summary's rank. A memory lifted by several summaries keeps its best rank. The
summaries themselves are returned only when summaries are asked for (see
:class:`~projections.ranking.direct.FullTextRanker`), and then with their recalled
sources grouped under them as one piece of evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from projections.ranking.candidates import Signals
from projections.ranking.port import Ranking, lift

__all__ = ["SessionsRanker"]


@dataclass(frozen=True)
class SessionsRanker:
    """Lifts the sources of the ``depth`` best-matching summaries."""

    depth: int = 3
    name: str = "sessions"
    needs_anchors: bool = False

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        groups = []
        for rank, summary in enumerate(signals.summaries[: self.depth], start=1):
            row = signals.row(summary)
            if row is not None:
                groups.append((rank, row.derived_from))
        return [lift(self.name, groups)]
