"""Delivery schedules for the property tests of the reference fold: how the events a
history appended reach a store.

Each event is first delivered in log order within its partition (Kafka's guarantee; the
partitions interleave in any order), and may then be delivered again at any later point:
a duplicate in the log at a later offset, as an at-least-once producer or relay writes
it, so the store's stored position does not filter it out and only its revision guards
do. Deliveries come in batches of 1 to 4 records (``apply_batch``), duplicates included.

The delivered log's offsets grow per partition across every example of a test function,
because the store under test keeps its positions across examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

from contracts import Event
from ledger.eventlog import LogPosition

Batch = list[tuple[Event, LogPosition]]


@dataclass
class Deliveries:
    """The delivered log of one example.

    Attributes:
        offsets: next offset per partition of the delivered log (shared across examples).
        first: each event's first delivery, in delivery order: what the reference folds.
        delivered: every delivery so far (first ones and duplicates).
    """

    offsets: dict[int, int]
    first: Batch = field(default_factory=list)
    delivered: Batch = field(default_factory=list)
    _pending: dict[int, list[Event]] = field(default_factory=dict)

    def append(self, records: Sequence[tuple[Event, LogPosition]]) -> None:
        """Queue records the ledger appended (in log order) for their first delivery."""
        for event, position in records:
            self._pending.setdefault(position.partition, []).append(event)

    def step(self, data: st.DataObject) -> list[Batch]:
        """Draw the next deliveries: first deliveries and duplicates in any mix, in batches."""
        items: Batch = []
        moves = data.draw(st.lists(st.sampled_from(("next", "again")), max_size=6), label="deliveries")
        for move in moves:
            if move == "next" and self._waiting():
                items.append(self._next(data))
            elif move == "again" and self.first:
                items.append(self._again(data))
        return self._batches(data, items)

    def rest(self, data: st.DataObject) -> list[Batch]:
        """Every event not delivered yet (partitions interleaved as drawn), in batches."""
        items: Batch = []
        while self._waiting():
            items.append(self._next(data))
        return self._batches(data, items)

    def tail(self, data: st.DataObject) -> list[Batch]:
        """Duplicates after everything was delivered: older events after newer ones. Maybe
        a suffix of the log sent again, in order (a relay resending everything after its
        last checkpoint) or backwards (each of its events after every newer one: what
        a guard against a newer event's mark alone must stop), then single events in any
        order."""
        if not self.first:
            return []
        last = len(self.first) - 1
        resent = data.draw(st.none() | st.integers(0, last), label="resent from")
        chosen = [] if resent is None else list(range(resent, len(self.first)))
        if chosen and data.draw(st.booleans(), label="resent backwards"):
            chosen.reverse()
        chosen += data.draw(st.lists(st.integers(0, last), max_size=6), label="duplicates")
        return self._batches(data, [self._at(self.first[i]) for i in chosen])

    def _waiting(self) -> list[int]:
        return sorted(p for p, events in self._pending.items() if events)

    def _next(self, data: st.DataObject) -> tuple[Event, LogPosition]:
        partition = data.draw(st.sampled_from(self._waiting()), label="partition")
        event = self._pending[partition].pop(0)
        item = self._deliver(event, partition)
        self.first.append(item)
        return item

    def _again(self, data: st.DataObject) -> tuple[Event, LogPosition]:
        return self._at(self.first[data.draw(st.integers(0, len(self.first) - 1), label="again")])

    def _at(self, original: tuple[Event, LogPosition]) -> tuple[Event, LogPosition]:
        return self._deliver(original[0], original[1].partition)

    def _deliver(self, event: Event, partition: int) -> tuple[Event, LogPosition]:
        offset = self.offsets.get(partition, 0)
        self.offsets[partition] = offset + 1
        item = (event, LogPosition(partition, offset))
        self.delivered.append(item)
        return item

    def _batches(self, data: st.DataObject, items: Batch) -> list[Batch]:
        out: list[Batch] = []
        while items:
            size = data.draw(st.integers(1, 4), label="batch")
            out.append(items[:size])
            items = items[size:]
        return out
