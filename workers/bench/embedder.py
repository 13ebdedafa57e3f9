"""The MiniLM embedder with its onnxruntime intra-op threads capped, next to the same
embedder with one thread per core, on the same texts, alone and beside a CPU-bound
neighbour process (what Kafka, PostgreSQL and the other workers are to the vectors
worker): texts/s of the embedder, and how much work the neighbour got done meanwhile.

The neighbour counts the rounds of a fixed loop it completes per second; its rate while
the embedder runs, next to its rate alone (measured first, in the same run), says how
much of the machine the embedder left to it.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from projections.embedding import MiniLMEmbedder
from workers.bench.env import Progress
from workers.bench.figures import Figure


def texts_of(n: int) -> list[str]:
    """``n`` memory-like texts of 5 to about 60 words (lengths vary, as in a conversation)."""
    words = "the user mentioned project deadline week meeting review budget travel kettle garden".split()
    return [" ".join(words[(i + k) % len(words)] for k in range(5 + (i * 7) % 56)) + f" ({i})." for i in range(n)]


def _neighbour(rounds: Synchronized[int], stop: Any) -> None:
    """Work until ``stop`` is set, counting rounds of a fixed loop in ``rounds``."""
    while not stop.is_set():
        sum(i * i for i in range(20_000))
        with rounds.get_lock():
            rounds.value += 1


def _neighbour_rate(seconds: float, work: Any = None) -> tuple[float, Any]:
    """The neighbour's rounds/s over ``seconds`` (or while ``work()`` runs), and what
    ``work`` returned."""
    context = multiprocessing.get_context("spawn")
    rounds = context.Value("q", 0)
    stop = context.Event()
    proc = context.Process(target=_neighbour, args=(rounds, stop), daemon=True)
    proc.start()
    try:
        while rounds.value == 0:  # started
            time.sleep(0.01)
        first, started = rounds.value, time.perf_counter()
        result = None
        if work is not None:
            result = work()
        else:
            time.sleep(seconds)
        done, elapsed = rounds.value, time.perf_counter() - started
    finally:
        stop.set()
        proc.join(timeout=10)
    return (done - first) / elapsed, result


def _embed_rate(embedder: MiniLMEmbedder, texts: list[str]) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()
    embedder.embed(texts)
    wall = time.perf_counter() - started
    return {"texts_per_s": round(len(texts) / wall, 1), "cores_busy": round((time.process_time() - cpu) / wall, 2)}


def bench_embedder(texts: int, progress: Progress) -> dict[str, Any]:
    """MiniLM over ``texts`` texts with 1 intra-op thread and with one per core (0),
    alone, then beside the neighbour. Returns, per setting, ``{"alone": {...},
    "beside": {...}, "neighbour_per_s"}`` and ``neighbour_alone_per_s``."""
    sample = texts_of(texts)
    out: dict[str, Any] = {"texts": texts}
    out["neighbour_alone_per_s"] = round(_neighbour_rate(3.0)[0], 1)
    for name, threads in (("threads_1", 1), ("threads_per_core", 0)):
        progress(f"embedder ({name})", 0, 2)
        embedder = MiniLMEmbedder(intra_op_threads=threads)
        embedder.embed(sample[:32])  # the model loaded
        alone = _embed_rate(embedder, sample)
        progress(f"embedder ({name})", 1, 2)
        rate, beside = _neighbour_rate(0, lambda e=embedder: _embed_rate(e, sample))
        out[name] = {"alone": alone, "beside": beside, "neighbour_per_s": round(rate, 1)}
        progress(f"embedder ({name})", 2, 2)
    return out


def embedder_figures(out: dict[str, Any]) -> list[Figure]:
    """The capped embedder next to the uncapped one, and what each left to the neighbour."""
    one, every = out["threads_1"], out["threads_per_core"]
    return [
        Figure(
            "embedder.threads_1",
            f"MiniLM, 1 intra-op thread, {out['texts']} texts, alone",
            one["alone"]["texts_per_s"],
            "texts/s",
            baseline=every["alone"]["texts_per_s"],
            baseline_label="one thread per core",
        ),
        Figure(
            "embedder.threads_1.shared",
            "MiniLM, 1 intra-op thread, beside a CPU-bound process",
            one["beside"]["texts_per_s"],
            "texts/s",
            baseline=every["beside"]["texts_per_s"],
            baseline_label="one thread per core",
        ),
        Figure(
            "embedder.neighbour",
            "the neighbour's work beside MiniLM with 1 intra-op thread",
            one["neighbour_per_s"],
            "rounds/s",
            baseline=every["neighbour_per_s"],
            baseline_label="beside one thread per core",
        ),
    ]
