"""What the evaluation reads from a built system (:class:`workers.bootstrap.Services`)."""

from __future__ import annotations

from collections.abc import Sequence

from projections.facts import STABLE
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

    return Stores(recall=svc.recall, principal=svc.principal(), embedder=route.embedder, turn_vectors=turn_vectors)
