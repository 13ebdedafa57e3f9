"""Maximal marginal relevance (Carbonell and Goldstein, "The use of MMR,
diversity-based reranking for reordering documents and producing summaries", SIGIR
1998): pick, one at a time, the candidate maximising
``lambda * rel(d) - (1 - lambda) * max over picked p of sim(d, p)``,
so that the results do not repeat one fact. ``rel`` is the candidate's score divided by
the best score of the pool (so both terms lie in [0, 1]); ``sim`` the cosine of the two
memories' embeddings, 0 when either has none (e.g. a summary)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from projections.ranking.candidates import Candidate

__all__ = ["mmr"]


def mmr(
    candidates: Sequence[Candidate], vectors: Mapping[str, Sequence[float]], lam: float, pool: int
) -> list[Candidate]:
    """``candidates`` (best first) with the first ``pool`` reordered by MMR; the rest
    follow in their order. ``vectors``: memory id -> unit-length embedding. ``lam`` = 1
    keeps the order."""
    head, tail = list(candidates[:pool]), list(candidates[pool:])
    if lam >= 1.0 or len(head) < 2:
        return head + tail
    top = max(c.score for c in head) or 1.0
    rel = np.array([c.score / top for c in head])
    dim = max(next((len(v) for v in vectors.values()), 0), 1)
    none = [0.0] * dim
    matrix: npt.NDArray[np.float64] = np.array([vectors.get(c.memory_id, none) for c in head], dtype=np.float64)
    sim = matrix @ matrix.T
    picked: list[int] = []
    closest = np.zeros(len(head))
    taken = np.zeros(len(head), dtype=bool)
    for _ in range(len(head)):
        # the first best among those left (np.argmax takes the first of equal gains)
        gain = np.where(taken, -np.inf, lam * rel - (1.0 - lam) * closest)
        best = int(np.argmax(gain))
        picked.append(best)
        taken[best] = True
        closest = np.maximum(closest, sim[best])
    return [head[i] for i in picked] + tail
