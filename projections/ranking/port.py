"""The ranker port: each voice of recall turns :class:`~projections.ranking.candidates.Signals`
into one or more rankings, without I/O.

A ranking lists memory ids best first with their rank (1 is best; ties share a rank:
a voice that lifts a whole group of memories gives each the group's rank). Rankings
are fused by weighted reciprocal rank fusion (:mod:`projections.ranking.fusion`).
Rankers with ``needs_anchors`` run in a second stage, after the others are fused, on
the best fused candidates (the anchors).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from projections.ranking.candidates import Signals

__all__ = ["Ranker", "Ranking", "lift", "ranked"]


@dataclass(frozen=True)
class Ranking:
    """One voice's ranking: ``name`` (recorded in ``matched_by``) and ``(memory_id,
    rank)`` pairs, best first, each id once, ranks from 1 and never decreasing."""

    name: str
    ranks: Sequence[tuple[str, int]]

    def ids(self) -> list[str]:
        return [m for m, _ in self.ranks]


def ranked(name: str, ids: Iterable[str]) -> Ranking:
    """A ranking in the order of ``ids`` (rank 1, 2, ...; a repeated id keeps its first place)."""
    return Ranking(name, [(m, n) for n, m in enumerate(dict.fromkeys(ids), start=1)])


def lift(name: str, groups: Iterable[tuple[int, Iterable[str]]]) -> Ranking:
    """A ranking in which each ``(rank, ids)`` group gives its ids that rank; an id
    lifted by several groups keeps its best rank (it counts once, as one piece of
    evidence). ``groups`` need not be sorted."""
    best: dict[str, int] = {}
    for rank, ids in groups:
        for m in ids:
            if m not in best or rank < best[m]:
                best[m] = rank
    return Ranking(name, sorted(best.items(), key=lambda p: (p[1], p[0])))


class Ranker(Protocol):
    """One voice of recall.

    Attributes:
        name: the ranker's name (:data:`projections.ranking.config.RANKER_NAMES`); its
            weight in the fusion is the configuration's weight of that name.
        needs_anchors: True for a second-stage ranker, which reads ``anchors`` (the best
            candidates of the first stage's fusion) and ``signals.neighbours``.
    """

    @property
    def name(self) -> str: ...

    @property
    def needs_anchors(self) -> bool: ...

    def rank(self, signals: Signals, anchors: Sequence[str]) -> list[Ranking]:
        """This voice's rankings of the memories in ``signals`` (``anchors``: best
        first, empty for a first-stage ranker). Never raises on empty signals."""
        ...
