"""The content of a batch of events, opened once: what ``ContentAccess.open_events``
returns, and what every projection of a pass reads instead of opening each event again.

An event that puts text into a store (``MemoryWritten``, ``MemoryRedacted``,
``SummaryDerived``, ``MemoryReinstated``) carries its text and its personal fields sealed
under the memory's data key. A batch is opened with one query for the tombstones of its
memories and one for its data keys; each text is decrypted once, whatever number of
projections reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from contracts import Event, MemoryRedacted, MemoryReinstated, MemoryWritten, SummaryDerived
from contracts.memory import PersonalFields, SealedText

SEALED_EVENTS = (MemoryWritten, MemoryRedacted, SummaryDerived, MemoryReinstated)
"""Events whose text (and personal fields) a projection opens."""

SealedEvent = MemoryWritten | MemoryRedacted | SummaryDerived | MemoryReinstated


def sealed_parts(event: SealedEvent) -> tuple[SealedText, SealedText | None]:
    """The sealed text of a write-type event and its sealed personal fields (``None``
    when the event carries none)."""
    if isinstance(event, MemoryRedacted | MemoryReinstated):
        return event.content, event.personal
    return event.memory.content, event.memory.personal


@dataclass(frozen=True)
class SealedItem:
    """One thing to open: ``ref`` names it in the result (an event id), ``text`` and
    ``personal`` are sealed under ``memory_id``'s data key, ``occurred_at`` (UTC) is when
    its event occurred (a key missing for a recent event is waited for), ``sources`` the
    memories it restates (a summary's: it is not opened when one is tombstoned)."""

    ref: str
    memory_id: str
    text: SealedText
    personal: SealedText | None
    occurred_at: datetime | None = None
    sources: tuple[str, ...] = ()

    @property
    def sealed(self) -> list[SealedText]:
        """Everything sealed in it: the text, then the personal fields if any."""
        return [self.text] if self.personal is None else [self.text, self.personal]


def sealed_item(event: SealedEvent) -> SealedItem:
    """What to open of a write-type event (``ref`` is its event id)."""
    text, personal = sealed_parts(event)
    sources = tuple(event.memory.provenance.derived_from) if isinstance(event, SummaryDerived) else ()
    return SealedItem(event.event_id, event.memory_id, text, personal, event.occurred_at, sources)


@dataclass(frozen=True)
class Opened:
    """One event's content: ``text`` is ``None`` when it may not be read (the memory is
    tombstoned, or its data key was destroyed or never came); ``personal`` is ``None``
    when ``text`` is, when the event carries no personal fields, or when they do not
    authenticate or parse."""

    text: str | None
    personal: PersonalFields | None = None


@dataclass(frozen=True)
class OpenedContent:
    """The opened content of a batch, by event id (``SealedItem.ref``), and the memories the tombstone
    registries named when it was opened (among the batch's memories and, for a summary,
    its sources).

    A projection still asks the registries itself when it applies (one query per batch):
    an erasure committed after this was opened must stop the write all the same.
    """

    by_event: Mapping[str, Opened] = field(default_factory=dict)
    erased: frozenset[str] = frozenset()

    def of(self, event: SealedEvent) -> Opened:
        """The content of ``event``.

        Raises:
            KeyError: ``event`` was not in the batch this was opened for (a caller bug: a
                projection must not store text nobody checked).
        """
        return self.by_event[event.event_id]

    def get(self, ref: str) -> Opened:
        """The content of the item ``ref`` (nothing readable if it was not opened here)."""
        return self.by_event.get(ref, Opened(None))

    def covers(self, events: Sequence[SealedEvent]) -> bool:
        """Whether every event of ``events`` was opened here."""
        return all(e.event_id in self.by_event for e in events)


def sealed_events(events: Sequence[Event]) -> list[SealedEvent]:
    """The write-type events of ``events`` (``SEALED_EVENTS``), in order."""
    return [e for e in events if isinstance(e, SEALED_EVENTS)]
