"""LoCoMo recall benchmark: the recall@k metric, the BM25 baseline and :func:`bench_recall` against the ledger."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from workers.bootstrap import Services
from workers.heap import FullCollections, settle
from workers.locomo.data import ATTRIBUTION, Conversation, NotIngestedError, Question, load_conversations
from workers.locomo.ingest import ProgressFn, _live_memory_counts
from workers.locomo.mapping import PURPOSE

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 25)
LATENCY_TARGET_MS: tuple[float, float] = (10.0, 30.0)
"""Recall latency targets, in-process, cache bypassed: p50 and p99 (ms)."""
EVALUATED_CATEGORIES = frozenset({1, 2, 3, 4})


#: The baselines published in the data README (../shared/data/locomo/README.md), measured
#: on the same 8 conversations with the same metric: retriever -> {k: recall@k}.
PUBLISHED_BASELINES: dict[str, dict[int, float]] = {
    "BM25 (rank_bm25, lowercase word tokens)": {1: 0.242, 5: 0.436, 10: 0.512, 25: 0.612},
    "dense, all-MiniLM-L6-v2 (int8 ONNX), cosine": {1: 0.159, 5: 0.373, 10: 0.452, 25: 0.586},
    "reciprocal rank fusion of the two (k=60)": {1: 0.217, 5: 0.458, 10: 0.559, 25: 0.680},
}


# -- the metric --------------------------------------------------------------------------


def recall_at_k(ranking: Sequence[str | None], evidence: Sequence[str], k: int) -> float:
    """Evidence-turn recall@k of one question: the share of its (distinct) evidence ids
    found among the first ``k`` entries of ``ranking``.

    This is the data README's metric (../shared/data/locomo/README.md, "Retrieval
    baselines"): "share of a question's evidence turns found in the top k of that
    conversation's turns". An evidence id that names no turn can never be found and
    counts as missed (that is how the README's numbers were computed). ``None`` entries
    in ``ranking`` are results that are not turns: they take a place but match nothing.

    Raises:
        ValueError: ``evidence`` is empty (such a question is not evaluated) or ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k: must be at least 1, got {k}")
    wanted = set(evidence)
    if not wanted:
        raise ValueError("evidence: a question without evidence ids cannot be scored")
    top = {r for r in ranking[:k] if r is not None}
    return len(wanted & top) / len(wanted)


def mean_recall_at_k(
    rankings: Sequence[Sequence[str | None]], evidences: Sequence[Sequence[str]], ks: Sequence[int]
) -> dict[int, float]:
    """The mean of :func:`recall_at_k` over questions (one ranking per question), per k.

    Raises:
        ValueError: different numbers of rankings and evidences, no questions, or as
            :func:`recall_at_k`.
    """
    if len(rankings) != len(evidences):
        raise ValueError(f"{len(rankings)} rankings for {len(evidences)} questions")
    if not rankings:
        raise ValueError("no questions to score")
    return {k: sum(recall_at_k(r, e, k) for r, e in zip(rankings, evidences, strict=True)) / len(rankings) for k in ks}


def evaluated_questions(conv: Conversation) -> list[Question]:
    """The questions the metric is computed over: categories 1-4 with at least one
    evidence id (category 5 is adversarial; two category 1-4 questions of the source have
    an empty evidence list and are left out, giving the README's 1,224)."""
    return [q for q in conv.qa if q.category in EVALUATED_CATEGORIES and q.evidence]


_TOKEN_RE = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens, as the README's BM25 baseline: ``re.findall(r"\\w+", text.lower())``."""
    return _TOKEN_RE.findall(text.lower())


def bm25_rankings(
    conv: Conversation, queries: Sequence[str], depth: int, times_ms: list[float] | None = None
) -> list[list[str]]:
    """For each query, the dia_ids of the ``depth`` best turns of ``conv`` under BM25
    (``rank_bm25.BM25Okapi`` with its default parameters over :attr:`Turn.document`,
    :func:`tokenize`); ties keep turn order. ``times_ms`` receives each query's time (ms)."""
    turns = conv.turns
    bm25 = BM25Okapi([tokenize(t.document) for t in turns])
    out: list[list[str]] = []
    for query in queries:
        started = time.perf_counter()
        scores = bm25.get_scores(tokenize(query))
        order = np.argsort(-scores, kind="stable")[:depth]
        if times_ms is not None:
            times_ms.append((time.perf_counter() - started) * 1000.0)
        out.append([turns[int(i)].dia_id for i in order])
    return out


# -- the benchmark -----------------------------------------------------------------------


@dataclass(frozen=True)
class RetrieverScores:
    """Mean evidence-turn recall@k of one retriever over ``questions`` questions."""

    name: str
    recall: dict[int, float]
    questions: int


@dataclass(frozen=True)
class RecallBenchReport:
    """The result of :func:`bench_recall`.

    ``rows``: the ledger's recall, then BM25 measured in the same run.
    ``unmatched_evidence``: evidence ids of evaluated questions that name no turn (always
    missed). Latencies are per recall call in milliseconds (``ledger_cached`` of those
    calls were answered by the recall cache, e.g. a question asked twice).
    ``gc_full_collections``: full garbage collections that ran during the timed calls,
    ``gc_pause_ms`` their total pause; ``heap_settled``: start-up was settled before them
    (:func:`workers.heap.settle`).
    """

    path: str
    ks: tuple[int, ...]
    rows: tuple[RetrieverScores, ...]
    conversations: int
    questions: int
    questions_without_evidence: int
    unmatched_evidence: int
    latency_ms_p50: float
    latency_ms_p99: float
    latency_ms_mean: float
    ledger_cached: int
    seconds: float
    embedder: str
    published: dict[str, dict[int, float]] = field(default_factory=lambda: dict(PUBLISHED_BASELINES))
    bm25_ms_p50: float | None = None
    bm25_ms_p99: float | None = None
    """The BM25 baseline's own query time in the same run (ms), the latency's baseline."""
    gc_full_collections: int = 0
    gc_pause_ms: float = 0.0
    heap_settled: bool = False
    cpu_ms_per_call: float | None = None
    """This process's CPU time (all its threads, ``time.process_time``) per recall call, ms:
    on a shared machine it varies less than the wall clock (PostgreSQL's is not in it)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = [
            {"name": r.name, "questions": r.questions, **{f"R@{k}": round(v, 4) for k, v in r.recall.items()}}
            for r in self.rows
        ]
        d["published"] = {name: {f"R@{k}": v for k, v in vals.items()} for name, vals in self.published.items()}
        d["metric"] = (
            "evidence-turn recall@k: share of a question's evidence turns found in the top k of that "
            "conversation's turns, averaged over questions of categories 1-4 (data README)"
        )
        d["attribution"] = ATTRIBUTION
        return d

    def render(self) -> str:
        heads = [f"R@{k}" for k in self.ks]
        width = max(len(r.name) for r in self.rows)
        width = max(width, *(len(name) + 2 for name in self.published), 24)
        lines = [
            f"LoCoMo evidence-turn recall@k: {self.conversations} conversation(s), {self.questions:,} questions "
            "(categories 1-4)",
            "",
            f"{'retriever':<{width}}  " + "  ".join(f"{h:>6}" for h in heads) + f"  {'questions':>9}",
        ]
        for r in self.rows:
            vals = "  ".join(f"{r.recall[k]:>6.3f}" for k in self.ks)
            lines.append(f"{r.name:<{width}}  {vals}  {r.questions:>9,}")
        lines.append("published baselines (data README, same 8 conversations and metric):")
        for name, published in self.published.items():
            cells = "  ".join(f"{published[k]:>6.3f}" if k in published else f"{'-':>6}" for k in self.ks)
            lines.append(f"{'  ' + name:<{width}}  {cells}  {1224:>9,}")
        p50_ms, p99_ms = LATENCY_TARGET_MS
        verdict = "met" if self.latency_ms_p50 <= p50_ms and self.latency_ms_p99 <= p99_ms else "missed"
        bm25 = (
            ""
            if self.bm25_ms_p50 is None or self.bm25_ms_p99 is None
            else f"; BM25 in the same run p50 {self.bm25_ms_p50:.2f} ms, p99 {self.bm25_ms_p99:.2f} ms"
        )
        cpu = (
            ""
            if self.cpu_ms_per_call is None
            else f"; this process's CPU {self.cpu_ms_per_call:.1f} ms per call (PostgreSQL's not included)"
        )
        lines += [
            "",
            f"ledger recall latency: p50 {self.latency_ms_p50:.1f} ms, p99 {self.latency_ms_p99:.1f} ms "
            f"(mean {self.latency_ms_mean:.1f} ms, {self.questions:,} calls, {self.ledger_cached} from cache)"
            f"{bm25}{cpu}; "
            f"target p50 <= {p50_ms:.0f} ms, p99 <= {p99_ms:.0f} ms: {verdict}",
            f"full garbage collections during the calls: {self.gc_full_collections} "
            f"({self.gc_pause_ms:.0f} ms in all; start-up {'settled first' if self.heap_settled else 'not settled'},"
            " see workers.heap)",
            f"evidence ids naming no turn (counted as missed): {self.unmatched_evidence}; "
            f"questions without evidence left out: {self.questions_without_evidence}",
            ATTRIBUTION,
        ]
        return "\n".join(lines)


def bench_recall(
    services: Services,
    path: Path,
    ks: Sequence[int] = DEFAULT_KS,
    progress: ProgressFn | None = None,
    limit: int | None = None,
    now: datetime | None = None,
    settle_heap: bool = True,
) -> RecallBenchReport:
    """Evidence-turn recall@k of the ledger's recall next to BM25, on conversations
    already ingested with :func:`ingest` (and projected).

    The metric is the data README's (see :func:`recall_at_k`), averaged over the
    questions of :func:`evaluated_questions`. For each question:

    * ledger: ``services.recall.recall(principal, subject_id=sample_id,
      purpose="conversation_memory", query=question, now=now, k=max(ks),
      include_summaries=False)``; each item's ``provenance["turn_id"]`` is its turn (items
      of another kind than ``fact`` hold their place but match no turn), the cache
      bypassed. Each call is timed (milliseconds, wall clock), after one untimed recall
      (which loads the embedding model) and, with ``settle_heap``,
      :func:`workers.heap.settle`, as a long-running process settles its start-up.
      Summaries are left out of the ranking (and so out of summary grouping): the metric
      is turn-level retrieval, and the data README's baselines rank turns only, so the
      numbers stay comparable with them.
    * BM25: :func:`bm25_rankings` over the conversation's turn documents.

    Args:
        ks: the cut-offs, each in 1..1000.
        progress: called as ``progress("recall", questions_done, questions_total)``.
        limit: only the first ``limit`` conversations.
        now: the recall time (aware); default the current UTC time, after every session.
        settle_heap: freeze what start-up made before the timed calls (:func:`workers.heap.settle`).

    Raises:
        FileNotFoundError, LocomoFormatError: see :func:`load_conversations`.
        NotIngestedError: a conversation's subject has no memories in the ledger.
        ValueError: ``ks`` empty or out of range, or ``now`` naive.
        NotAuthorisedError: the principal has no ``read`` grant for a subject.
    """
    ks = tuple(sorted(set(ks)))
    if not ks or ks[0] < 1 or ks[-1] > 1000:
        raise ValueError(f"ks: give cut-offs between 1 and 1000, got {ks}")
    now = now or datetime.now(UTC)
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now: must be timezone-aware (UTC)")
    depth = ks[-1]
    convs = load_conversations(path, limit)
    present = _live_memory_counts(services, [c.sample_id for c in convs])
    missing = [c.sample_id for c in convs if c.sample_id not in present]
    if missing:
        raise NotIngestedError(missing)
    principal = services.principal()
    per_conv = [(c, evaluated_questions(c)) for c in convs]
    total = sum(len(qs) for _, qs in per_conv)
    ledger_rankings: list[list[str | None]] = []
    bm25_all: list[list[str]] = []
    evidences: list[tuple[str, ...]] = []
    latencies: list[float] = []
    cpu_s = 0.0
    bm25_ms: list[float] = []
    cached = unmatched = without = done = 0
    first = next(((c, qs[0]) for c, qs in per_conv if qs), None)
    if first is not None:  # loads the embedding model, untimed
        services.recall.recall(principal, first[0].sample_id, PURPOSE, first[1].question, now, k=depth, use_cache=False)
    if settle_heap:
        settle()
    collections = FullCollections().start()
    started = time.perf_counter()
    for conv, questions in per_conv:
        turn_ids = {t.dia_id for t in conv.turns}
        without += sum(1 for q in conv.qa if q.category in EVALUATED_CATEGORIES and not q.evidence)
        unmatched += sum(1 for q in questions for e in q.evidence if e not in turn_ids)
        bm25_all += bm25_rankings(conv, [q.question for q in questions], depth, bm25_ms)
        for q in questions:
            c0, t0 = time.process_time(), time.perf_counter()
            result = services.recall.recall(
                principal,
                subject_id=conv.sample_id,
                purpose=PURPOSE,
                query=q.question,
                now=now,
                k=depth,
                include_summaries=False,  # turn-level retrieval, comparable with the README's baselines
                use_cache=False,  # the latency of ranking, not of a cache lookup
            )
            latencies.append((time.perf_counter() - t0) * 1000.0)
            cpu_s += time.process_time() - c0
            cached += int(result.cached)
            ledger_rankings.append(
                [str(i.provenance.get("turn_id")) if i.kind == "fact" else None for i in result.items]
            )
            evidences.append(q.evidence)
            done += 1
            if progress is not None:
                progress("recall", done, total)
    seconds = time.perf_counter() - started
    collections.stop()
    if not evidences:
        raise ValueError(f"{path}: no questions of categories 1-4 with evidence to score")
    lat = np.asarray(latencies)
    return RecallBenchReport(
        path=str(path),
        ks=ks,
        rows=(
            RetrieverScores(
                f"ledger recall ({'+'.join(services.recall.ranking.enabled())}; {services.settings.embedder})",
                mean_recall_at_k(ledger_rankings, evidences, ks),
                len(evidences),
            ),
            RetrieverScores("BM25 (rank_bm25, this run)", mean_recall_at_k(bm25_all, evidences, ks), len(evidences)),
        ),
        conversations=len(convs),
        questions=len(evidences),
        questions_without_evidence=without,
        unmatched_evidence=unmatched,
        latency_ms_p50=round(float(np.percentile(lat, 50)), 3),
        latency_ms_p99=round(float(np.percentile(lat, 99)), 3),
        latency_ms_mean=round(float(lat.mean()), 3),
        ledger_cached=cached,
        seconds=round(seconds, 3),
        embedder=services.settings.embedder,
        bm25_ms_p50=round(float(np.percentile(bm25_ms, 50)), 3),
        bm25_ms_p99=round(float(np.percentile(bm25_ms, 99)), 3),
        gc_full_collections=collections.count,
        gc_pause_ms=round(collections.pause_ms, 1),
        heap_settled=settle_heap,
        cpu_ms_per_call=round(cpu_s * 1000.0 / len(latencies), 2),
    )
