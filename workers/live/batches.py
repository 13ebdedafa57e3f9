"""Batches with no fixed timer: a batch ends as soon as the consumer has nothing more to give.

faust's ``Stream.take(n, within)`` / ``take_events`` hold a partial batch until its
timer runs out (``within`` seconds), so every event of a quiet stream waits that long
before it is applied. ``drain`` yields a batch when ``max_records`` events are buffered
or when the stream's channel queue is empty, i.e. the consumer has delivered every
record it fetched so far: a lone event is applied at once, and under load, while one
batch is being applied, the next one accumulates by itself (the batch grows with the
backlog, up to ``max_records``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


async def drain(stream: Any, max_records: int) -> AsyncIterator[list[Any]]:
    """The events of ``stream`` (a faust ``Stream``, acks manual: ``stream.noack()``) in
    batches of 1 to ``max_records``, each yielded as soon as no further event is queued
    on the stream's channel. The caller acks the events once it has applied them.

    Raises:
        ValueError: ``max_records`` is below 1 (names the field).
    """
    if max_records < 1:
        raise ValueError(f"max_records: must be at least 1, got {max_records}")
    queue = stream.channel.queue
    batch: list[Any] = []
    async for event in stream.events():
        batch.append(event)
        if len(batch) >= max_records or queue.empty():
            yield batch
            batch = []
