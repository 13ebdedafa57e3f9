"""The metrics of a whole system on the test services: what the wrapped ports count
(events appended, records applied, dead letters, recall latency) and what the
ledger-state collector reads at scrape time (positions, lag in records and seconds,
erasures pending and complete with their propagation time)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import Metric

from contracts import EraseMemories, utc_now
from projections.errors import UnreadableErasureError
from tests.builders import PURPOSE, memory_write
from workers.bootstrap import Services
from workers.live.apply import record_in
from workers.metrics.ledger_state import LedgerStateCollector


def scrape(svc: Services) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the ledger-state families, by name and sorted labels."""
    registry = CollectorRegistry()
    registry.register(LedgerStateCollector(svc.pool, lambda: svc.log))
    metrics: list[Metric] = list(registry.collect())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in metrics for s in m.samples}


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_positions_lag_and_erasures_are_read_at_scrape_time(svc: Services) -> None:
    p = svc.principal()
    appended = counted("memledger_events_appended_total", type="MemoryWritten")
    applied = counted("memledger_projection_records_applied_total", projection="facts_v1")
    kept = svc.ledger.write(p, memory_write("alice", "Alice prefers short answers"))
    gone = svc.ledger.write(p, memory_write("alice", "Alice's locker code is 4711", key="locker"))
    assert counted("memledger_events_appended_total", type="MemoryWritten") == appended + 2

    before = scrape(svc)
    assert before[("memledger_metrics_source_up", (("source", "postgres"),))] == 1.0
    assert before[("memledger_log_end_offset", (("partition", "0"),))] == 2.0
    facts = (("partition", "0"), ("projection", "facts_v1"))
    assert before[("memledger_projection_applied_offset", facts)] == -1.0
    assert before[("memledger_projection_lag_records", facts)] == 2.0
    assert before[("memledger_projection_lag_seconds", facts)] >= 0.0
    assert before[("memledger_projection_info", (("projection", "facts_v1"), ("state", "serving")))] == 1.0

    svc.catch_up()
    assert counted("memledger_projection_records_applied_total", projection="facts_v1") == applied + 2
    recalls = counted("memledger_recall_duration_seconds_count", result="cache_miss")
    svc.recall.recall(p, "alice", PURPOSE, "short answers", utc_now())
    assert counted("memledger_recall_duration_seconds_count", result="cache_miss") == recalls + 1
    caught_up = scrape(svc)
    assert caught_up[("memledger_projection_applied_offset", facts)] == 1.0
    assert caught_up[("memledger_projection_lag_records", facts)] == 0.0
    assert caught_up[("memledger_projection_lag_seconds", facts)] == 0.0

    erased = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone.memory_id or "",), reason="asked"))
    pending = scrape(svc)
    assert pending[("memledger_erasures_requested_total", ())] == 1.0
    assert pending[("memledger_erasures_pending", ())] == 1.0
    assert pending[("memledger_erasures_complete_total", ())] == 0.0
    svc.catch_up()
    done = scrape(svc)
    assert done[("memledger_erasures_pending", ())] == 0.0
    assert done[("memledger_erasures_complete_total", ())] == 1.0
    assert done[("memledger_erasure_propagation_seconds_count", ())] == 1.0
    assert done[("memledger_erasure_propagation_seconds_bucket", (("le", "+Inf"),))] == 1.0
    assert 0.0 < done[("memledger_erasure_propagation_seconds_sum", ())] < 60.0
    labels = {v for (_, ls) in done for _, v in ls}
    assert not labels & {"alice", kept.memory_id, gone.memory_id, erased.request_id}


def test_a_record_that_is_no_event_is_counted_as_a_dead_letter_of_each_projection(svc: Services) -> None:
    before = counted("memledger_dead_letters_total", projection="cache_v1")
    svc.log.append("alice", b"not an event")
    svc.catch_up()
    assert counted("memledger_dead_letters_total", projection="cache_v1") == before + 1
    assert scrape(svc)[("memledger_projection_lag_records", (("partition", "0"), ("projection", "cache_v1")))] == 0


def test_a_stalled_partition_is_shown_with_its_offset_and_reason(svc: Services) -> None:
    svc.ledger.write(svc.principal(), memory_write("alice", "Alice prefers short answers"))
    newer = b'{"type": "ErasureRequested", "schema_version": 2, "subject_id": "alice", "request_id": "er-x"}'
    at = svc.log.append("alice", newer)
    cause = "unreadable erasure: schema_version: ErasureRequested v2 is newer than this reader's v1"
    record_in(svc.pool)(UnreadableErasureError("facts_v1", at.partition, at.offset, 1, cause))  # as a worker does
    stalled = {k: v for k, v in scrape(svc).items() if k[0] == "memledger_projection_stalled_offset"}
    labels = (("partition", str(at.partition)), ("projection", "facts_v1"), ("reason", "unreadable erasure"))
    assert stalled == {("memledger_projection_stalled_offset", labels): float(at.offset)}


def test_a_source_that_does_not_answer_is_reported_not_raised(svc: Services) -> None:
    def down() -> None:
        raise ConnectionError("the log is down")

    registry = CollectorRegistry()
    registry.register(LedgerStateCollector(svc.pool, down))  # type: ignore[arg-type]
    samples = {(s.name, tuple(s.labels.values())): s.value for m in registry.collect() for s in m.samples}
    assert samples[("memledger_metrics_source_up", ("log",))] == 0.0
    assert samples[("memledger_metrics_source_up", ("postgres",))] == 1.0
    assert ("memledger_erasures_pending", ()) in samples
    assert not any(name == "memledger_projection_lag_records" for name, _ in samples)
