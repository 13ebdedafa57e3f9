"""The content of a batch of events, opened once: what ``ContentAccess.open_events``
returns, and what every projection of a pass reads instead of opening each event again.

An event that puts text into a store (``MemoryWritten``, ``MemoryRedacted``,
``SummaryDerived``) carries its text and its personal fields sealed under the memory's
data key. A batch is opened with one query for the tombstones of its memories and one
for its data keys; each text is decrypted once, whatever number of projections reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from contracts import Event, MemoryRedacted, MemoryWritten, SummaryDerived
from contracts.memory import PersonalFields, SealedText

SEALED_EVENTS = (MemoryWritten, MemoryRedacted, SummaryDerived)
"""Events whose text (and personal fields) a projection opens."""

SealedEvent = MemoryWritten | MemoryRedacted | SummaryDerived


def sealed_parts(event: SealedEvent) -> tuple[SealedText, SealedText | None]:
    """The sealed text of a write-type event and its sealed personal fields (``None``
    when the event carries none)."""
    if isinstance(event, MemoryRedacted):
        return event.content, event.personal
    return event.memory.content, event.memory.personal


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
    """The opened content of a batch, by event id, and the memories the tombstone
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

    def covers(self, events: list[SealedEvent]) -> bool:
        """Whether every event of ``events`` was opened here."""
        return all(e.event_id in self.by_event for e in events)


def sealed_events(events: list[Event]) -> list[SealedEvent]:
    """The write-type events of ``events`` (``SEALED_EVENTS``), in order."""
    return [e for e in events if isinstance(e, SEALED_EVENTS)]
