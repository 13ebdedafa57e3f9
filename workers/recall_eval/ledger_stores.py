"""What the evaluation reads from a built system (:class:`workers.bootstrap.Services`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from projections import versions
from projections.embedding import Embedder, token_counts
from projections.facts import STABLE
from projections.recall import Recall
from workers.bootstrap import Services
from workers.locomo.data import NotIngestedError
from workers.locomo.ingest import _live_memory_counts
from workers.recall_eval.dataset import EvalSet
from workers.recall_eval.runner import Stores

__all__ = ["stores_of"]


def stores_of(svc: Services, evalset: EvalSet) -> Stores:
    """The evaluation's view of ``svc``: its recall and principal, the serving vectors
    version's embedder, and the stored turn vectors of each subject.

    Raises:
        NotIngestedError: a conversation of ``evalset`` has no memories in the ledger.
    """
    subjects = [c.sample_id for c in evalset.conversations]
    present = _live_memory_counts(svc, subjects)
    missing = [s for s in subjects if s not in present]
    if missing:
        raise NotIngestedError(missing)
    route = svc.stores.route()
    assert route.embedder is not None

    def turn_vectors(subject_id: str) -> dict[str, Sequence[float]]:
        with svc.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT memory_id, provenance->>'turn_id' FROM {STABLE.facts}"
                " WHERE subject_id = %s AND kind = 'fact' AND status = 'active' AND provenance ? 'turn_id'",
                (subject_id,),
            ).fetchall()
        if route.index is None or not rows:
            return {}
        points = route.index.retrieve([str(r[0]) for r in rows])
        return {str(turn): points[str(mid)].vector for mid, turn in rows if str(mid) in points}

    memo = ReusedEmbeddings(route.embedder)
    reusing = Recall(
        svc.pool,
        None,
        None,
        facts=STABLE,
        summaries_table=versions.STABLE_VIEWS["summaries"][0][0],
        route=lambda: replace(svc.stores.route(), embedder=memo),
        ranking=svc.recall.ranking,
    )
    return Stores(
        recall=svc.recall,
        principal=svc.principal(),
        embedder=route.embedder,
        turn_vectors=turn_vectors,
        reusing=reusing,
    )


class ReusedEmbeddings:
    """An embedder that embeds each text once with ``inner`` and returns the same vector
    again after (same model name and dimension)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self._known: dict[str, list[float]] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        todo = [t for t in dict.fromkeys(texts) if t not in self._known]
        self._known.update(zip(todo, self.inner.embed(todo), strict=True))
        return [self._known[t] for t in texts]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return token_counts(self.inner, texts)
