"""Running the evaluation: every variant of the ledger's recall over every query, the
baselines over the same queries, and the measures of each (:func:`evaluate`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ledger.principals import Principal
from projections.embedding import Embedder, token_counts
from projections.ranking.config import RankingConfig
from projections.recall import Recall
from workers.heap import settle
from workers.locomo.data import Conversation
from workers.locomo.mapping import PURPOSE
from workers.recall_eval.baselines import BaselineRun, bm25_stemmed, bm25_words, dense
from workers.recall_eval.dataset import EvalQuery, EvalSet
from workers.recall_eval.measures import measure
from workers.recall_eval.report import EvalReport, Row
from workers.recall_eval.variants import Variant, variants

__all__ = ["DEPTH", "TOKENS_AT", "Stores", "evaluate"]

DEPTH = 25
"""Results asked for per query: the deepest cut-off measured."""

TOKENS_AT = 10
"""The cut-off at which the context cost (tokens per query) is counted."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Stores:
    """What the evaluation reads: recall, its principal, the embedder of the serving
    vectors version, and for each subject the stored vector of each turn (dia id ->
    vector) for the dense baseline. ``reusing``: the same recall, but with each query's
    embedding computed once and reused (for the variants after the first, whose latency
    is then not reported)."""

    recall: Recall
    principal: Principal
    embedder: Embedder
    turn_vectors: Callable[[str], dict[str, Sequence[float]]]
    reusing: Recall | None = None


def _run_ledger(
    recall: Recall, stores: Stores, evalset: EvalSet, variant: Variant, now: datetime, progress: Progress | None
) -> tuple[dict[str, list[str]], list[int], list[float]]:
    rankings: dict[str, list[str]] = {}
    tokens: list[int] = []
    latency: list[float] = []
    for n, q in enumerate(evalset.queries, start=1):
        started = time.perf_counter()
        result = recall.recall(
            stores.principal,
            q.subject_id,
            PURPOSE,
            q.text,
            now,
            k=DEPTH,
            include_summaries=False,  # turn-level retrieval, comparable with the baselines
            ranking=variant.ranking,
            use_cache=False,
        )
        latency.append((time.perf_counter() - started) * 1000.0)
        rankings[q.qid] = [str(i.provenance.get("turn_id") or f"?{i.memory_id}") for i in result.items]
        tokens.append(sum(m.tokens for i in result.items[:TOKENS_AT] for m in i.members()))
        if progress is not None:
            progress(variant.name, n, len(evalset.queries))
    return rankings, tokens, latency


def _baselines(stores: Stores, evalset: EvalSet) -> list[tuple[str, BaselineRun]]:
    def dense_run(conv: Conversation, queries: list[EvalQuery]) -> BaselineRun:
        return dense(conv, queries, DEPTH, stores.embedder, stores.turn_vectors(conv.sample_id))

    makers: list[tuple[str, Callable[[Conversation, list[EvalQuery]], BaselineRun]]] = [
        ("BM25 (bm25s, word tokens)", lambda c, qs: bm25_words(c, qs, DEPTH)),
        ("BM25 (bm25s, stemmed, no stop words)", lambda c, qs: bm25_stemmed(c, qs, DEPTH)),
        (f"dense ({stores.embedder.model_name}, exhaustive cosine)", dense_run),
    ]
    out: list[tuple[str, BaselineRun]] = []
    for name, make in makers:
        rankings: dict[str, list[str]] = {}
        latency: list[float] = []
        for conv in evalset.conversations:
            found = make(conv, [q for q in evalset.queries if q.subject_id == conv.sample_id])
            rankings.update(found.rankings)
            latency += found.latency_ms
        out.append((name, BaselineRun(rankings, latency)))
    return out


def _row(
    name: str,
    group: str,
    evalset: EvalSet,
    rankings: dict[str, list[str]],
    tokens: Sequence[int],
    latency: Sequence[float] | None,
) -> Row:
    per_category = {
        c: measure(evalset.qrels([q for q in evalset.queries if q.category == c]), rankings)
        for c in evalset.categories()
    }
    lat = np.asarray(latency if latency else [np.nan], dtype=float)
    return Row(
        name=name,
        group=group,
        measures=measure(evalset.qrels(), rankings),
        per_category=per_category,
        tokens_per_query=float(np.mean(tokens)) if len(tokens) else 0.0,
        latency_ms_p50=float(np.percentile(lat, 50)),
        latency_ms_p99=float(np.percentile(lat, 99)),
    )


def evaluate(
    stores: Stores,
    evalset: EvalSet,
    config: RankingConfig,
    now: datetime,
    ablations: bool = True,
    progress: Progress | None = None,
) -> EvalReport:
    """Measure the baselines and every variant of ``config`` (:func:`variants`) on
    ``evalset``, each query asked once per variant at ``now``, the cache bypassed. The
    first variant (the fusion) is timed as it runs, once start-up is settled
    (:func:`workers.heap.settle`, after the baselines have loaded the embedding model);
    the others reuse each query's embedding (``stores.reusing``) and report no latency.

    Raises:
        whatever recall raises (``RecallError``, ``NotAuthorisedError``, store errors).
    """
    started = time.perf_counter()
    rows: list[Row] = []
    docs = {t.dia_id: t.document for c in evalset.conversations for t in c.turns}
    for name, base in _baselines(stores, evalset):
        tokens = [
            sum(token_counts(stores.embedder, [docs[d] for d in base.rankings[q.qid][:TOKENS_AT]]))
            for q in evalset.queries
        ]
        rows.append(_row(name, "baseline", evalset, base.rankings, tokens, base.latency_ms))
        if progress is not None:
            progress(name, len(evalset.queries), len(evalset.queries))
    settle()
    for n, variant in enumerate(variants(config, ablations)):
        recall = stores.recall if n == 0 or stores.reusing is None else stores.reusing
        rankings, tokens, latency = _run_ledger(recall, stores, evalset, variant, now, progress)
        timed = recall is stores.recall
        rows.append(_row(variant.name, variant.group, evalset, rankings, tokens, latency if timed else None))
    return EvalReport(
        path=evalset.path,
        conversations=len(evalset.conversations),
        queries=len(evalset.queries),
        config=config.fingerprint(),
        embedder=stores.embedder.model_name,
        rows=rows,
        seconds=time.perf_counter() - started,
    )
