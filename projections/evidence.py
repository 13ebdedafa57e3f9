"""Recall items and the pure rules that turn fused candidates into evidence.

- :func:`rrf`: reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009):
  ``score = sum over rankers of 1 / (rrf_k + rank)``, rank starting at 1.
- :func:`one_per_key`: never two current answers for one key.
- :func:`group_summaries`: a summary and the memories it was derived from are one piece
  of evidence, not independent ones (DESIGN.md, invariant 4).

No I/O here: :mod:`projections.recall` fetches the rows and calls these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from contracts import iso_utc
from projections.ranking.fusion import fuse
from projections.ranking.port import ranked


@dataclass(frozen=True)
class RecallItem:
    """One recalled memory (or summary) with its provenance.

    ``score`` is the shaped fusion score (README, "How recall ranks"; for a summary that
    groups its sources: the best score in the group); ``matched_by`` lists the rankings
    that found it (``fts``, ``summary_fts``, ``vector``, ``lineage``, ``sessions``,
    ``neighbours``). ``derived_from`` lists the sources of a summary or inference ([]
    otherwise); ``grouped`` holds the sources of a summary that were recalled with it and
    are not listed again at top level. ``conflicts`` lists the open conflicts a
    ``needs_confirmation`` memory is in. ``status`` is the status at the time judged
    (``as_of`` when given). ``tokens``: the length of ``content`` in the embedder's tokens
    (:func:`projections.embedding.token_counts`), the grouped sources not included.
    """

    memory_id: str
    subject_id: str
    kind: str
    content: str
    score: float
    status: str
    confirmed: bool
    confidence: float
    key: str | None
    purpose: str
    scope: dict[str, str]
    provenance: dict[str, Any]
    revision: int
    expires_at: str | None
    sensitivity: str
    needs_confirmation: bool
    matched_by: list[str] = field(default_factory=list)
    derived_from: list[str] = field(default_factory=list)
    grouped: list[RecallItem] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    tokens: int = 0

    def members(self) -> list[RecallItem]:
        """This item and the items grouped under it."""
        return [self, *self.grouped]


class Evidence(Protocol):
    """What :func:`one_per_key` and :func:`group_summaries` read of an item: a
    :class:`RecallItem`, or a :class:`~projections.ranking.candidates.Candidate` before
    its text is fetched."""

    @property
    def memory_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def key(self) -> str | None: ...
    @property
    def scope(self) -> dict[str, str]: ...
    @property
    def derived_from(self) -> list[str]: ...
    @property
    def score(self) -> float: ...


E = TypeVar("E", bound=Evidence)


def rrf(rankings: Sequence[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion of ranked id lists (rank 1 = first), each of weight 1:
    id -> fused score (:func:`projections.ranking.fusion.fuse`)."""
    fused = fuse([(ranked(str(n), r), 1.0) for n, r in enumerate(rankings)], k)
    return {m: score for m, (score, _) in fused.items()}


def item_from_row(
    row: dict[str, Any],
    score: float,
    matched: list[str],
    conflicts: Sequence[str] = (),
    tokens: int = 0,
    grouped: Sequence[RecallItem] = (),
) -> RecallItem:
    """A :class:`RecallItem` from a facts row (or a summaries row selected with the same
    column names, see :mod:`projections.recall_queries`)."""
    return RecallItem(
        memory_id=row["memory_id"],
        subject_id=row["subject_id"],
        kind=row["kind"],
        content=row["content"],
        score=round(score, 6),
        status=row["status"],
        confirmed=row["confirmed"],
        confidence=row["confidence"],
        key=row["key"],
        purpose=row["purpose"],
        scope={"type": row["scope_type"], "id": row["scope_id"]},
        provenance=row["provenance"],
        revision=row["revision"],
        expires_at=iso_utc(row["expires_at"]) if row["expires_at"] else None,
        sensitivity=row["sensitivity"],
        needs_confirmation=row["status"] == "needs_confirmation",
        matched_by=matched,
        derived_from=list(row["derived_from"] or []),
        grouped=list(grouped),
        conflicts=list(conflicts),
        tokens=tokens,
    )


_SCOPE_SPECIFICITY = {"document": 0, "workspace": 1, "subject": 2}


def one_per_key(items: Sequence[E]) -> list[E]:
    """``items`` (best first) with one ``active`` memory per non-null key.

    Memories of different scopes may share a key (a subject-wide preference and a
    document's own one are different slots); for a task the most specific scope answers
    (document, then workspace, then subject), and among equals the better ranked one.
    The answer keeps its own rank (the order stays the order of the scores). Within one slot the
    ledger never leaves two active memories, but a projection in the middle of a batch
    can show both for a moment. Summaries are left alone: :func:`group_summaries`
    handles them with their sources."""

    def keyed(item: E) -> bool:
        return item.status == "active" and item.key is not None and item.kind != "summary"

    answer: dict[str, E] = {}
    for item in items:
        if keyed(item):
            held = answer.get(item.key)  # type: ignore[arg-type]
            if held is None or _SCOPE_SPECIFICITY[item.scope["type"]] < _SCOPE_SPECIFICITY[held.scope["type"]]:
                answer[item.key] = item  # type: ignore[index]
    return [item for item in items if not keyed(item) or answer[item.key] is item]  # type: ignore[index]


def group_summaries(items: Sequence[E]) -> list[E]:
    """Fold each summary's recalled sources under it (``grouped``), best first.

    ``items`` are the fused candidates, best first. A summary claims those of its
    ``derived_from`` that are among the candidates and not claimed by a summary whose
    group ranks better; the group takes the place of its best-ranked member, with that
    member's score. Claimed sources are not listed at top level. Returns the top-level
    items, best first.
    """
    rank = {item.memory_id: n for n, item in enumerate(items)}
    summaries = [i for i in items if i.kind == "summary"]

    def best(summary: E) -> int:
        return min([rank[summary.memory_id], *(rank[s] for s in summary.derived_from if s in rank)])

    claimed: dict[str, list[E]] = {}
    taken: set[str] = set()
    for summary in sorted(summaries, key=lambda s: (best(s), rank[s.memory_id])):
        members = [
            i for i in items if i.memory_id in summary.derived_from and i.kind != "summary" and i.memory_id not in taken
        ]
        taken.update(m.memory_id for m in members)
        claimed[summary.memory_id] = members
    placed: list[tuple[int, E]] = []
    for n, item in enumerate(items):
        if item.memory_id in taken:
            continue
        group = claimed.get(item.memory_id)
        if group:
            position = min([n, *(rank[m.memory_id] for m in group)])
            score = max([item.score, *(m.score for m in group)])
            item = replace(item, grouped=group, score=score)  # type: ignore[type-var]
            n = position
        placed.append((n, item))
    return [item for _, item in sorted(placed, key=lambda p: p[0])]
