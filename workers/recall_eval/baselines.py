"""Baselines computed in the same run as the ledger's recall, over each conversation's
turns (one document per turn, ``"speaker: text"`` plus the image caption: the memory's
content), with maintained libraries:

- BM25 over lowercase word tokens (``\\w+``), as the data README's baseline (which used
  rank_bm25's ``BM25Okapi``, k1 = 1.5, b = 0.75): bm25s, Robertson's variant, same k1 and b;
- BM25 with English stop words removed and Snowball stemming: bm25s, Lucene's variant,
  k1 = 1.2, b = 0.75, PyStemmer;
- dense: cosine of the query's embedding (the serving vectors version's embedder) to the
  turn vectors the ledger stored, exhaustively (no index), best first.

Each query is timed alone (wall clock, milliseconds), embedding included for dense.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import bm25s
import numpy as np
import numpy.typing as npt
import Stemmer

from projections.embedding import Embedder
from workers.locomo.data import Conversation
from workers.recall_eval.dataset import EvalQuery

__all__ = ["BaselineRun", "bm25_stemmed", "bm25_words", "dense"]

_WORD = re.compile(r"\w+")

logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG


@dataclass(frozen=True)
class BaselineRun:
    """A baseline's rankings (qid -> dia ids, best first) and per-query latency (ms)."""

    rankings: dict[str, list[str]]
    latency_ms: list[float]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _bm25(
    conv: Conversation,
    queries: Sequence[EvalQuery],
    depth: int,
    method: str,
    k1: float,
    tokens: Callable[[list[str]], list[list[str]]],
) -> BaselineRun:
    turns = conv.turns
    index = bm25s.BM25(method=method, k1=k1, b=0.75)
    index.index(tokens([t.document for t in turns]), show_progress=False)
    rankings: dict[str, list[str]] = {}
    latency: list[float] = []
    for q in queries:
        started = time.perf_counter()
        scores = index.get_scores(tokens([q.text])[0])
        order = np.argsort(-scores, kind="stable")[:depth]
        latency.append((time.perf_counter() - started) * 1000.0)
        rankings[q.qid] = [turns[int(i)].dia_id for i in order]
    return BaselineRun(rankings, latency)


def bm25_words(conv: Conversation, queries: Sequence[EvalQuery], depth: int) -> BaselineRun:
    """BM25 (bm25s, Robertson, k1 1.5, b 0.75) over lowercase word tokens."""
    return _bm25(conv, queries, depth, "robertson", 1.5, lambda texts: [_words(t) for t in texts])


def bm25_stemmed(conv: Conversation, queries: Sequence[EvalQuery], depth: int) -> BaselineRun:
    """BM25 (bm25s, Lucene, k1 1.2, b 0.75) over Snowball-stemmed words without English stop words."""
    stemmer = Stemmer.Stemmer("english")

    def tokens(texts: list[str]) -> list[list[str]]:
        found = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)
        return [list(t) for t in found]

    return _bm25(conv, queries, depth, "lucene", 1.2, tokens)


def dense(
    conv: Conversation,
    queries: Sequence[EvalQuery],
    depth: int,
    embedder: Embedder,
    turn_vectors: dict[str, Sequence[float]],
) -> BaselineRun:
    """Exhaustive cosine over ``turn_vectors`` (dia id -> the stored unit vector of that
    turn's memory; turns without one are left out), best first."""
    ids = [t.dia_id for t in conv.turns if t.dia_id in turn_vectors]
    matrix: npt.NDArray[np.float32] = np.asarray([turn_vectors[i] for i in ids], dtype=np.float32).reshape(len(ids), -1)
    rankings: dict[str, list[str]] = {}
    latency: list[float] = []
    for q in queries:
        started = time.perf_counter()
        vector = np.asarray(embedder.embed([q.text])[0], dtype=np.float32)
        scores = matrix @ vector if len(ids) else np.zeros(0, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:depth]
        latency.append((time.perf_counter() - started) * 1000.0)
        rankings[q.qid] = [ids[int(i)] for i in order]
    return BaselineRun(rankings, latency)
