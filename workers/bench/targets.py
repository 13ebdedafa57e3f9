"""The targets of ``make bench`` on the project's 2-core machine, one place for all of
them, by figure key (``workers.bench.figures.Figure.key``)."""

from __future__ import annotations

from workers.bench.figures import Target

TARGETS: dict[str, Target] = {
    # append through the ledger next to the raw kafka-python producer (same bytes, settings, libraries)
    "append.ledger": Target("ratio_at_least", 0.8),
    # replays next to the raw kafka-python read of the same topic
    "replay.facts": Target("ratio_at_least", 0.5),
    "replay.all": Target("ratio_at_least", 0.35),
    # at a steady 200 events/s: acknowledgement -> applied
    "lag.facts_cache_summaries.p99": Target("at_most", 250.0),
    "lag.vectors.hashing.p99": Target("at_most", 250.0),
    "lag.vectors.minilm.p99": Target("at_most", 1000.0),
    # a worker killed with SIGKILL, restarted by its supervisor: applying again, and back in its group
    "rejoin.applying.max": Target("at_most", 5000.0),
    "rejoin.member.max": Target("at_most", 5000.0),
    # under the same load, MiniLM: erasure acknowledgement -> absent by every probe / every receipt
    "erasure.minilm.absent.p99": Target("at_most", 500.0),
    "erasure.minilm.complete.p99": Target("at_most", 1000.0),
    # LoCoMo through Kafka into all four stores next to the embedder's own throughput
    "locomo.throughput": Target("ratio_at_least", 0.8),
    # recall over the 8 LoCoMo subjects, in-process, cache bypassed
    "recall.p50": Target("at_most", 10.0),
    "recall.p99": Target("at_most", 30.0),
    # memledger serve at 100 requests/s (80% recall, 20% write) from 16 clients, next to the
    # same operations in-process in the same run (issue 10)
    **{
        f"serve.{mode}.{key}": rule
        for mode in ("embedded", "distributed")
        for key, rule in {
            "write_ack.p50": Target("ratio_at_most", 1.5),
            "write_ack.p99": Target("at_most", 50.0),
            "recall.p50": Target("ratio_at_most", 1.5),
            "recall.p99": Target("at_most", 100.0),
            "ack_to_recallable.p99": Target("at_most", 250.0),
        }.items()
    },
}


def target(key: str) -> Target | None:
    """The target of figure ``key``, if it has one."""
    return TARGETS.get(key)
