"""The measures of the evaluation, computed by ir-measures (pytrec_eval underneath), not
by hand: recall at 1, 5, 10 and 25 (the share of a query's relevant documents in its top
k: the data README's evidence-turn recall), the reciprocal rank of the first relevant
document (MRR over queries) and nDCG@10, each averaged over queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import ir_measures
from ir_measures import RR, R, nDCG

__all__ = ["MEASURES", "NOTHING", "as_run", "measure"]

MEASURES: Final = {"R@1": R @ 1, "R@5": R @ 5, "R@10": R @ 10, "R@25": R @ 25, "MRR": RR, "nDCG@10": nDCG @ 10}
"""Report name -> ir-measures measure."""

NOTHING: Final = "\x00no result"
"""A document id that is never relevant: every query's run ends with it, so a query
with no result is still counted (pytrec_eval averages over the queries of the run)."""


def as_run(rankings: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """``qid -> ranked doc ids`` (best first; a repeated id keeps its first place) as an
    ir-measures run: strictly decreasing scores, :data:`NOTHING` last."""
    run: dict[str, dict[str, float]] = {}
    for qid, ranking in rankings.items():
        docs = [*dict.fromkeys(d for d in ranking if d != NOTHING), NOTHING]
        run[qid] = {doc: float(len(docs) - n) for n, doc in enumerate(docs)}
    return run


def measure(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Every measure of :data:`MEASURES`, averaged over the queries of ``qrels`` (each
    must have a ranking, possibly empty).

    Raises:
        ValueError: a query of ``qrels`` has no ranking.
    """
    missing = sorted(set(qrels) - set(rankings))
    if missing:
        raise ValueError(f"rankings: no ranking for {len(missing)} queries, e.g. {missing[0]}")
    run = as_run({q: rankings[q] for q in qrels})
    found = ir_measures.calc_aggregate(list(MEASURES.values()), dict(qrels), run)
    return {name: float(found[m]) for name, m in MEASURES.items()}
