"""Every metric family of memory-ledger, in one place (prometheus-client).

Names follow the Prometheus naming conventions (prometheus.io/docs/practices/naming):
the ``memledger_`` prefix, base units in the name (``_seconds``, ``_bytes``), counters
end in ``_total``, and a gauge names what it measures (``_records``, ``_offset``).
Labels never carry a subject id, a memory id, a request id or any content: only
bounded sets of values that the code itself names (a projection version such as
``facts_v1``, a log partition number, an event type, a route template such as
``/v1/subjects/{subject_id}/recall``, a refusal reason, an HTTP status code).

The families defined here are counted by the process that does the work (its own
requests, appends, recalls, applied records, dead letters). The families read at scrape
time from PostgreSQL and the log (positions, lag, erasures) are built by
``workers.metrics.ledger_state``; their names are listed in ``LEDGER_STATE`` below.

Defining a metric does not connect anywhere: importing this module is cheap and safe.
In a faust worker child (``PROMETHEUS_MULTIPROC_DIR`` set by its supervisor) the values
live in files of that directory, and the supervisor serves their sum.
"""

from __future__ import annotations

import gc
import os

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, values

from contracts.events import EVENT_TYPES

disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``_created`` series: Prometheus's text format has no use for them

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Buckets of request and recall latency histograms, seconds (1 ms to 10 s)."""

BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Buckets of a projection's batch apply time, seconds."""

EVENT_TYPE_NAMES = frozenset(str(m.model_fields["type"].default) for m in EVENT_TYPES)
"""The values of the ``type`` label of ``memledger_events_appended_total`` (else ``other``)."""

REFUSAL_REASONS = {
    400: "malformed",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    429: "rate_limited",
    500: "failed",
    503: "unavailable",
}
"""The ``reason`` of a refused HTTP request, by status code: the gateway's error kinds
(``workers.gateway.errors``), as ``workers.api.problems`` maps them to statuses."""

EVENTS_APPENDED = Counter(
    "memledger_events_appended",
    "Events this process appended to the event log (durable: counted once the log acknowledged them), by event type.",
    ["type"],
)
APPEND_FAILURES = Counter(
    "memledger_event_append_failures",
    "Appends to the event log that failed (nothing was acknowledged; the command wrote nothing).",
)
RECALL_SECONDS = Histogram(
    "memledger_recall_duration_seconds",
    "Time of one recall in this process (seconds), by result: cache_hit, cache_miss (ranked from the stores) or error.",
    ["result"],
    buckets=LATENCY_BUCKETS_S,
)
RECORDS_APPLIED = Counter(
    "memledger_projection_records_applied",
    "Log records this process applied to a projection version (events applied, not dead letters), by projection.",
    ["projection"],
)
BATCH_SECONDS = Histogram(
    "memledger_projection_batch_duration_seconds",
    "Time to apply one batch of records to a projection version's store (seconds), by projection.",
    ["projection"],
    buckets=BATCH_BUCKETS_S,
)
DEAD_LETTERS = Counter(
    "memledger_dead_letters",
    "Records this process sent to the dead-letter queue (not valid events), by the projection that refused them.",
    ["projection"],
)
HTTP_REQUESTS = Counter(
    "memledger_http_requests",
    "HTTP requests answered by memledger serve, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "memledger_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response (seconds), by method and route template.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS_S,
)
HTTP_REFUSALS = Counter(
    "memledger_http_refusals",
    "HTTP requests refused (status 400 and above), by method, route template and reason (REFUSAL_REASONS).",
    ["method", "route", "reason"],
)
HEAP_FROZEN = Gauge(
    "memledger_heap_frozen_objects",
    "Objects in this process's permanent garbage-collector generation (gc.get_freeze_count(), read at scrape"
    " time): what start-up made, frozen by workers.heap.settle so full collections no longer walk it; 0: not settled.",
)
HEAP_FROZEN.set_function(gc.get_freeze_count)

LEDGER_STATE = (
    "memledger_log_end_offset",
    "memledger_projection_applied_offset",
    "memledger_projection_lag_records",
    "memledger_projection_lag_seconds",
    "memledger_projection_info",
    "memledger_projection_stalled_offset",
    "memledger_erasures_requested_total",
    "memledger_erasures_complete_total",
    "memledger_erasures_pending",
    "memledger_erasure_propagation_seconds",
    "memledger_outbox_records",
    "memledger_outbox_subjects",
    "memledger_outbox_oldest_seconds",
    "memledger_metrics_source_up",
)
"""The families ``workers.metrics.ledger_state`` reads at scrape time."""


def event_type(value: bytes) -> str:
    """The ``type`` of an encoded event (``contracts.encode_event``: compact JSON whose
    first ``"type"`` key is the event's own; the envelope's fields before it hold no
    object), or ``other`` when it is not one of ``EVENT_TYPE_NAMES``."""
    start = value.find(b'"type":"')
    if start < 0:
        return "other"
    start += 8
    end = value.find(b'"', start, start + 64)
    name = value[start:end].decode("ascii", "replace") if end > 0 else ""
    return name if name in EVENT_TYPE_NAMES else "other"


def refusal_reason(status: int) -> str:
    """The ``reason`` label of a refused request's status (``REFUSAL_REASONS``; any
    other status of 400 and above is ``other``)."""
    return REFUSAL_REASONS.get(status, "other")


def use_multiprocess_values() -> None:
    """In a worker child forked by the supervisor: write the values of every labelled
    family from now on to ``PROMETHEUS_MULTIPROC_DIR`` (one file per process id), which
    the supervisor's endpoint sums. prometheus-client chooses where values live when it
    is imported, and the supervisor imported it, in memory, before it set that directory;
    a forked child inherits that choice. The labelled families make their values at their
    first ``labels()`` call, in the child. Does nothing without the directory."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
