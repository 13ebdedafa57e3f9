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
    dim = next((len(v) for v in vectors.values()), 0)
    matrix: npt.NDArray[np.float64] = np.zeros((len(head), max(dim, 1)))
    for n, c in enumerate(head):
        if c.memory_id in vectors:
            matrix[n] = vectors[c.memory_id]
    sim = matrix @ matrix.T
    picked: list[int] = []
    closest = np.zeros(len(head))
    left = list(range(len(head)))
    while left:
        gain = [lam * rel[i] - (1.0 - lam) * (closest[i] if picked else 0.0) for i in left]
        best = left.pop(int(np.argmax(gain)))
        picked.append(best)
        closest = np.maximum(closest, sim[best])
    return [head[i] for i in picked] + tail
