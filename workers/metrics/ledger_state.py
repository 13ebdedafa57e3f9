"""What the ledger's stores say at scrape time: where each projection version is in the
log, how far behind it is, and how erasures are progressing. Read from PostgreSQL (the
version registry, ``projection_positions``, ``erasure_requests``, ``erasure_receipts``)
and from the event log (its end offsets and, for a version that is behind, the append
time of the first record it has not applied) every time ``/metrics`` is scraped, so the
figures are the same whichever process serves them and need no process to have seen the
work happen.

Families (``workers.metrics.families.LEDGER_STATE``):

- ``memledger_log_end_offset{partition}``: the offset the next appended record gets;
- ``memledger_projection_applied_offset{projection, partition}``: the last offset the
  version applied (-1: none yet), from its own stored positions (what is applied, not
  the consumer group's committed offset);
- ``memledger_projection_lag_records{projection, partition}``: records appended and not
  applied yet;
- ``memledger_projection_lag_seconds{projection, partition}``: how long the oldest of
  those has been waiting (now minus its append time; 0 when none waits);
- ``memledger_projection_info{projection, state}``: 1 for every version that is not
  retired (``building``, ``serving``, ``previous``);
- ``memledger_projection_stalled_offset{projection, partition, reason}``: the offset of
  the record a version stopped at on a partition rather than skip it (``reason``: what
  stopped it, e.g. ``unreadable erasure``; the full reason is in ``memledger lag`` and
  ``memledger dlq``), one sample per stall in force (``projections.stalls``);
- ``memledger_erasures_requested_total``, ``memledger_erasures_complete_total``,
  ``memledger_erasures_pending``: erasure requests, and those whose receipts every store
  has written (``facts``, ``history``, ``vectors``, ``cache``, ``summaries``, from the
  serving versions), and the rest. Receipts only: the live probes of ``memledger trace``
  are not run at a scrape;
- ``memledger_erasure_propagation_seconds``: a histogram, over the complete requests, of
  the time from the request to the last store's first receipt (the store as it was then:
  a version rebuilt later writes a later receipt, which does not count);
- ``memledger_outbox_records``, ``memledger_outbox_subjects``,
  ``memledger_outbox_oldest_seconds``: what commands recorded and the log has not
  acknowledged yet (``ledger.outbox.backlog``; zeros in the embedded default), and how
  long the oldest of it has waited: a backlog that grows or ages is a log refusing a
  record, and the subject's later records wait behind it;
- ``memledger_metrics_source_up{source}``: 1 when ``postgres`` (or ``log``) answered
  this scrape, 0 when it did not (its families are then left out).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg_pool import ConnectionPool

from ledger import outbox
from ledger.eventlog import EventLog
from projections import stalls
from projections.trace import STORES

log = logging.getLogger(__name__)

RECEIPT_STORES = tuple(s for s in STORES if s != "log")
"""The stores whose receipts make an erasure complete (the log's is the request itself)."""

PROPAGATION_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
"""Buckets of ``memledger_erasure_propagation_seconds``."""

STATEMENT_TIMEOUT_MS = 5000
"""Longest a scrape's PostgreSQL statement may run, milliseconds."""

TIMESTAMP_BUDGET_S = 2.0
"""Longest a scrape spends reading the append times of waiting records, seconds; the
lag in seconds of the versions left then is not exported by that scrape."""

_ERASURES_SQL = """
WITH serving AS (SELECT name || '_v' || version AS id FROM projection_versions WHERE state = 'serving'),
per AS (
  SELECT r.requested_at,
         (SELECT count(DISTINCT e.store) FROM erasure_receipts e
           WHERE e.request_id = r.request_id AND e.store = ANY(%(stores)s)
             AND e.projection IN (SELECT id FROM serving)) AS stores,
         (SELECT max(f.first_at) FROM (SELECT min(e.applied_at) AS first_at FROM erasure_receipts e
           WHERE e.request_id = r.request_id AND e.store = ANY(%(stores)s) GROUP BY e.store) f) AS done_at
    FROM erasure_requests r
),
judged AS (
  SELECT stores >= %(n)s AS complete, greatest(0, extract(epoch FROM done_at - requested_at))::float8 AS s FROM per
)
SELECT count(*), count(*) FILTER (WHERE complete), coalesce(sum(s) FILTER (WHERE complete), 0){buckets}
  FROM judged
"""


def _erasures_sql() -> str:
    buckets = "".join(f", count(*) FILTER (WHERE complete AND s <= {b!r})" for b in PROPAGATION_BUCKETS_S)
    return _ERASURES_SQL.format(buckets=buckets)


class LedgerStateCollector(Collector):
    """A prometheus-client collector of the families above, read from ``pool`` and the
    event log (``event_log()`` returns it, built on first use: a supervisor opens no
    Kafka client before the first scrape). ``clock`` gives UTC epoch seconds."""

    def __init__(
        self, pool: ConnectionPool, event_log: Callable[[], EventLog], clock: Callable[[], float] = time.time
    ) -> None:
        self._pool = pool
        self._event_log = event_log
        self._clock = clock
        self._timestamps: dict[tuple[int, int], float] = {}

    def describe(self) -> Iterable[Metric]:
        return []  # families are only known at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        """The families, read now; a source that fails is reported by
        ``memledger_metrics_source_up`` and its families are left out."""
        up = GaugeMetricFamily(
            "memledger_metrics_source_up",
            "Whether a source of the ledger-state metrics answered this scrape.",
            labels=["source"],
        )
        ends: dict[int, int] | None = None
        try:
            ends = self._event_log().end_offsets()
        except Exception as exc:  # a scrape reports what it can
            log.warning("metrics: the event log did not answer: %s", exc)
        up.add_metric(["log"], 1.0 if ends is not None else 0.0)
        try:
            with self._pool.connection(timeout=5) as conn:
                conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
                state = _read_state(conn)
        except Exception as exc:  # PostgreSQL down: no positions, no erasures this time
            log.warning("metrics: PostgreSQL did not answer: %s", exc)
            up.add_metric(["postgres"], 0.0)
            yield up
            return
        up.add_metric(["postgres"], 1.0)
        yield up
        if ends is not None:
            yield from self._positions(ends, state["versions"], state["positions"])
        yield _stall_family(state["stalls"])
        yield from _outbox_families(state["outbox"], self._clock())
        yield from _erasure_families(state["erasures"])

    def _positions(
        self, ends: dict[int, int], live: list[tuple[str, str]], done: dict[tuple[str, int], int]
    ) -> Iterator[Metric]:
        end = GaugeMetricFamily(
            "memledger_log_end_offset", "The offset the next appended record gets.", labels=["partition"]
        )
        info = GaugeMetricFamily(
            "memledger_projection_info",
            "1 for every projection version that is not retired.",
            labels=["projection", "state"],
        )
        applied = GaugeMetricFamily(
            "memledger_projection_applied_offset",
            "The last log offset a projection version applied (-1: none yet), from its stored positions.",
            labels=["projection", "partition"],
        )
        lag = GaugeMetricFamily(
            "memledger_projection_lag_records",
            "Records appended to the log and not applied by the projection version yet.",
            labels=["projection", "partition"],
        )
        lag_s = GaugeMetricFamily(
            "memledger_projection_lag_seconds",
            "Seconds the oldest record not applied by the projection version has waited since its append (0: none).",
            labels=["projection", "partition"],
        )
        for partition, next_offset in sorted(ends.items()):
            end.add_metric([str(partition)], float(next_offset))
        deadline = time.monotonic() + TIMESTAMP_BUDGET_S
        now = self._clock()
        for pid, state in live:
            info.add_metric([pid, state], 1.0)
            for partition, next_offset in sorted(ends.items()):
                last = done.get((pid, partition), -1)
                labels = [pid, str(partition)]
                applied.add_metric(labels, float(last))
                behind = max(0, next_offset - (last + 1))
                lag.add_metric(labels, float(behind))
                waited = 0.0 if behind == 0 else self._waited(partition, last + 1, now, deadline)
                if waited is not None:
                    lag_s.add_metric(labels, waited)
        self._timestamps = {k: v for k, v in list(self._timestamps.items())[-1000:]}
        yield from (end, info, applied, lag, lag_s)

    def _waited(self, partition: int, offset: int, now: float, deadline: float) -> float | None:
        """Seconds since the record at ``(partition, offset)`` was appended (its append
        time is read once and remembered), ``None`` past the scrape's budget or when it
        cannot be read."""
        key = (partition, offset)
        if key not in self._timestamps:
            if time.monotonic() > deadline:
                return None
            try:
                records = self._event_log().read(partition, offset, 1)
            except Exception as exc:
                log.warning("metrics: cannot read partition %d offset %d: %s", partition, offset, exc)
                return None
            if not records:
                return None
            self._timestamps[key] = records[0].timestamp_ms / 1000.0
        return max(0.0, now - self._timestamps[key])


def _read_state(conn: Any) -> dict[str, Any]:
    """Versions that are not retired, stored positions and the erasure figures (zeros
    before the ledger's tables exist)."""
    exists = conn.execute(
        "SELECT to_regclass('projection_versions') IS NOT NULL, to_regclass('projection_positions') IS NOT NULL,"
        " to_regclass('erasure_requests') IS NOT NULL AND to_regclass('erasure_receipts') IS NOT NULL"
    ).fetchone()
    registry, positions, erasures = exists
    live: list[tuple[str, str]] = []
    if registry:
        rows = conn.execute(
            "SELECT name || '_v' || version, state FROM projection_versions WHERE state <> 'retired'"
            " ORDER BY name, version"
        ).fetchall()
        live = [(str(p), str(s)) for p, s in rows]
    done: dict[tuple[str, int], int] = {}
    if positions:
        rows = conn.execute('SELECT projection, partition, "offset" FROM projection_positions').fetchall()
        done = {(str(p), int(part)): int(off) for p, part, off in rows}
    figures: tuple[Any, ...] = (0, 0, 0.0, *([0] * len(PROPAGATION_BUCKETS_S)))
    if erasures and registry:
        figures = tuple(
            conn.execute(_erasures_sql(), {"stores": list(RECEIPT_STORES), "n": len(RECEIPT_STORES)}).fetchone()
        )
    return {
        "versions": live,
        "positions": done,
        "erasures": figures,
        "stalls": stalls.stalled(conn),
        "outbox": outbox.backlog(conn),
    }


def _stall_family(stopped: list[stalls.Stall]) -> Metric:
    family = GaugeMetricFamily(
        "memledger_projection_stalled_offset",
        "The offset of the record a projection version stopped at on a partition rather than skip it.",
        labels=["projection", "partition", "reason"],
    )
    for stall in stopped:
        family.add_metric([stall.projection, str(stall.partition), stall.kind], float(stall.offset))
    return family


def _outbox_families(waiting: outbox.Backlog, now_s: float) -> Iterator[Metric]:
    age = 0.0 if waiting.oldest_at is None else max(0.0, now_s - waiting.oldest_at.timestamp())
    yield GaugeMetricFamily(
        "memledger_outbox_records",
        "Records commands wrote that the log has not acknowledged yet (the outbox).",
        value=float(waiting.records),
    )
    yield GaugeMetricFamily(
        "memledger_outbox_subjects", "Subjects with records in the outbox.", value=float(waiting.subjects)
    )
    yield GaugeMetricFamily(
        "memledger_outbox_oldest_seconds",
        "Seconds the oldest record of the outbox has waited for the log (0: none).",
        value=age,
    )


def _erasure_families(figures: tuple[Any, ...]) -> Iterator[Metric]:
    requested, complete, total_s, *cumulative = figures
    yield CounterMetricFamily(
        "memledger_erasures_requested", "Erasure requests the ledger recorded.", value=float(requested)
    )
    yield CounterMetricFamily(
        "memledger_erasures_complete",
        "Erasure requests every store has written its receipt for (serving versions; receipts only, no probes).",
        value=float(complete),
    )
    yield GaugeMetricFamily(
        "memledger_erasures_pending",
        "Erasure requests some store has not written its receipt for yet.",
        value=float(requested - complete),
    )
    buckets = [(repr(b), float(c)) for b, c in zip(PROPAGATION_BUCKETS_S, cumulative, strict=True)]
    buckets.append(("+Inf", float(complete)))
    yield HistogramMetricFamily(
        "memledger_erasure_propagation_seconds",
        "Seconds from an erasure request to the first receipt of the last store, over the complete requests.",
        buckets=buckets,
        sum_value=float(total_s),
    )
