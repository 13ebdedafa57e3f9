"""What ranking knows of a memory, and what the stores answered for one query.

A :class:`Candidate` is a memory as far as ranking needs it: no text, no provenance
beyond its source. :class:`Signals` holds every store's answer for one query (the
rankings of full-text search and vector similarity, the derived memories and summaries
that matched, the rows of every memory named, the neighbours of the anchors): the
rankers (:mod:`projections.ranking.port`) read it and do no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType

__all__ = ["Candidate", "Neighbour", "Signals"]


@dataclass(frozen=True)
class Candidate:
    """A memory (or summary) that passed recall's rules, without its text.

    Attributes:
        memory_id: its id.
        kind: ``fact``, ``preference``, ``inference``, ``task_state`` or ``summary``.
        status: its status at the time judged (``now``, or ``as_of``).
        key: the attribute it answers (None for none).
        scope: ``{"type": ..., "id": ...}``.
        derived_from: the memory ids it was made from ([] unless an inference or summary).
        source_ref: ``provenance.source_ref`` (the document, conversation or session it
            came from), or None.
        written_at: ``provenance.written_at`` (UTC): when it was stated.
        confidence: in [0, 1] (starts from veracity, raised by reinforcement).
        confirmed: the subject confirmed it.
        score: its score once ranked (0 before).
        matched_by: the rankers that found it, in fusion order.
        grouped: the sources of a summary recalled with it (see
            :func:`projections.evidence.group_summaries`).
    """

    memory_id: str
    kind: str
    status: str
    key: str | None
    scope: dict[str, str]
    derived_from: list[str]
    source_ref: str | None
    written_at: datetime
    confidence: float
    confirmed: bool
    score: float = 0.0
    matched_by: list[str] = field(default_factory=list)
    grouped: list[Candidate] = field(default_factory=list)

    def members(self) -> list[Candidate]:
        """This candidate and those grouped under it."""
        return [self, *self.grouped]

    def ranked(self, score: float, matched_by: list[str]) -> Candidate:
        """This candidate with ``score`` and ``matched_by`` (what ``dataclasses.replace``
        gives, at half its cost: ranking makes one per fused candidate)."""
        return Candidate(
            self.memory_id,
            self.kind,
            self.status,
            self.key,
            self.scope,
            self.derived_from,
            self.source_ref,
            self.written_at,
            self.confidence,
            self.confirmed,
            score,
            matched_by,
            self.grouped,
        )


@dataclass(frozen=True)
class Neighbour:
    """``memory_id`` is ``distance`` places from ``anchor`` in their common source
    (memories of one ``source_ref`` in the order the ledger recorded them)."""

    anchor: str
    memory_id: str
    distance: int


def _frozen(rows: Mapping[str, Candidate]) -> Mapping[str, Candidate]:
    return MappingProxyType(dict(rows))


@dataclass(frozen=True)
class Signals:
    """The stores' answers for one query; every list is best first.

    Attributes:
        fts: memories that may be returned, by full-text score.
        fts_derived: derived memories (inferences, any status recall may rank), by
            full-text score: the lineage ranker's seeds.
        vector: memories that may be returned, by vector similarity.
        vector_derived: derived memories by vector similarity (lineage seeds).
        summaries: summaries by full-text score (returned when summaries are asked for;
            the sessions ranker's seeds either way).
        rows: every memory and summary named here whose row passed the rules, by id.
        provisional: rows taken from the vector index's payloads, not yet checked
            against the facts table (facts are trusted: an id that fails there is dropped).
        neighbours: neighbours of the anchors (empty until fetched).
    """

    fts: Sequence[str] = ()
    fts_derived: Sequence[str] = ()
    vector: Sequence[str] = ()
    vector_derived: Sequence[str] = ()
    summaries: Sequence[str] = ()
    rows: Mapping[str, Candidate] = field(default_factory=dict)
    provisional: Mapping[str, Candidate] = field(default_factory=dict)
    neighbours: Sequence[Neighbour] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", _frozen(self.rows))
        object.__setattr__(self, "provisional", _frozen(self.provisional))

    def row(self, memory_id: str) -> Candidate | None:
        """The checked row of ``memory_id``, else its provisional one, else None."""
        return self.rows.get(memory_id) or self.provisional.get(memory_id)

    def checked(self, rows: Mapping[str, Candidate], neighbours: Sequence[Neighbour] = ()) -> Signals:
        """These signals once the facts table has answered: ``rows`` added to the checked
        ones, the provisional rows dropped, and the anchors' ``neighbours``."""
        return replace(self, rows={**self.rows, **rows}, provisional={}, neighbours=tuple(neighbours))
