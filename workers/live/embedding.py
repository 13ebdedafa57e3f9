"""The live vectors worker's second step: embedding, in a thread of its own.

The vectors projection applies a batch in log order without embedding
(``VectorsProjection.defer_embedding``: its writes are queued with the batch's
position); this thread embeds the queue and writes the points
(``VectorsProjection.embed_pending``), so that erasures and their receipts never wait
behind the embedding backlog.
"""

from __future__ import annotations

import logging
import threading

from projections.base import Projection
from projections.vectors import VectorsProjection

log = logging.getLogger(__name__)


def start_embedding(projection: Projection, lock: threading.Lock) -> threading.Event | None:
    """For the vectors projection: defer its embedding and embed the queue in a daemon
    thread that holds ``lock`` (the store's, shared with the batches and the erasure
    lane) while it writes points. Returns the event that stops the thread (``None``, and
    nothing started, for other projections)."""
    if not isinstance(projection, VectorsProjection):
        return None
    projection.defer_embedding = True
    stop = threading.Event()
    threading.Thread(target=run_embedding, args=(projection, lock, stop), daemon=True, name="embedding").start()
    return stop


def run_embedding(
    projection: VectorsProjection, lock: threading.Lock, stop: threading.Event, poll_s: float = 1.0
) -> None:
    """Embed ``projection``'s queued writes until ``stop`` is set: as soon as a batch
    that queued writes commits (``projection.queued``), else every ``poll_s`` seconds; a
    failure is logged and tried again a second later (the rows stay queued: nothing is
    skipped)."""
    while not stop.is_set():
        projection.queued.clear()
        try:
            while projection.embed_pending(lock=lock) and not stop.is_set():
                pass
        except Exception as exc:  # a store is down: the queue waits, the in-order apply goes on
            log.warning("%s: embedding failed, retrying in 1 s: %s", projection.id, exc)
            stop.wait(1.0)
            continue
        projection.queued.wait(poll_s)
