"""LoCoMo through Kafka: the 8 conversations ingested through the ledger, projected into
all four stores by the faust workers, next to the embedder's own throughput on the same
texts measured in the same run (the vectors projection's floor); then evidence-turn
recall@k and recall latency next to BM25 (``workers.locomo.bench_recall``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from contracts import MemoryWrite
from projections.embedding import build_embedder
from workers.bench.env import Progress, services_for, start_worker, stop_worker, wait_caught_up
from workers.bench.figures import Figure
from workers.bench.targets import target
from workers.bootstrap import PROJECTION_NAMES

EMBED_BATCH = 64
"""Texts per ``Embedder.embed`` call when the embedder is timed alone."""


def locomo_texts(path: Path) -> list[str]:
    """The text of every memory the LoCoMo ingest writes (turns, session summaries,
    observations), in ingest order."""
    from workers.locomo.data import load_conversations
    from workers.locomo.mapping import build_writes

    texts: list[str] = []
    for conv in load_conversations(path):
        start = len(texts)

        def collect(batch: list[MemoryWrite], start: int = start) -> list[str]:
            texts.extend(cmd.content for cmd in batch)
            return [f"m-{start}-{i}" for i in range(len(texts) - len(batch), len(texts))]

        build_writes(conv, collect)
    return texts


def embedder_throughput(name: str, texts: list[str], progress: Progress) -> dict[str, Any]:
    """The embedder ``name`` alone over ``texts`` in batches of ``EMBED_BATCH``: texts/s."""
    embedder = build_embedder(name)
    embedder.embed(texts[:EMBED_BATCH])  # load the model and warm it up before timing
    started = time.perf_counter()
    for first in range(0, len(texts), EMBED_BATCH):
        embedder.embed(texts[first : first + EMBED_BATCH])
        progress("embedder alone", min(len(texts), first + EMBED_BATCH), len(texts))
    seconds = time.perf_counter() - started
    return {
        "model": embedder.model_name,
        "texts": len(texts),
        "seconds": round(seconds, 2),
        "texts_per_s": round(len(texts) / seconds, 1),
    }


def bench_locomo(env: dict[str, str], path: Path, progress: Progress) -> dict[str, Any]:
    """Time the embedder alone on LoCoMo's texts, then ingest LoCoMo through Kafka, let the
    faust workers project it into every store, then bench recall.

    Returns ``{"embedder_alone", "ingest", "memories", "ingest_and_projection_s",
    "memories_per_s", "recall", "recall_text"}``.
    """
    from workers.locomo import bench_recall, ingest

    alone = embedder_throughput(env["MEMLEDGER_EMBEDDER"], locomo_texts(path), progress)
    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-locomo.log")
    svc = services_for(env)
    try:
        started = time.perf_counter()
        ingested = ingest(svc, path, progress=progress)
        wait_caught_up(svc, PROJECTION_NAMES, 1800, progress)
        projected_s = time.perf_counter() - started
        time.sleep(1.0)  # the vectors worker's query endpoint is up once it has projected
        report = bench_recall(svc, path, progress=progress)
    finally:
        stop_worker(worker)
        svc.close()
    memories = sum(ingested.memories.values())
    return {
        "embedder_alone": alone,
        "ingest": ingested.to_dict(),
        "memories": memories,
        "ingest_and_projection_s": round(projected_s, 1),
        "memories_per_s": round(memories / projected_s, 1),
        "recall": report.to_dict(),
        "recall_text": report.render(),
    }


def locomo_figures(out: dict[str, Any]) -> list[Figure]:
    """The LoCoMo throughput figure and the recall latency figures."""
    alone = out["embedder_alone"]
    recall = out["recall"]
    figures = [
        Figure(
            "locomo.throughput",
            f"LoCoMo through Kafka into all four stores, {out['memories']:,} memories "
            f"({out['ingest']['events_appended']:,} events), memories/s",
            out["memories_per_s"],
            "texts/s",
            baseline=alone["texts_per_s"],
            baseline_label=f"{alone['model']} alone",
            target=target("locomo.throughput"),
        )
    ]
    for q in ("p50", "p99"):
        figures.append(
            Figure(
                f"recall.{q}",
                f"recall {q} over the {recall['conversations']} LoCoMo subjects ({recall['ledger_cached']} from cache)",
                recall[f"latency_ms_{q}"],
                "ms",
                target=target(f"recall.{q}"),
            )
        )
    return figures
