"""What the reference fold may read of a log's sealed fields, as plain data.

The reference (:mod:`projections.reference.fold`) is pure: it never opens a key or reads
a registry itself. :func:`read_sealed` does that I/O once, before the fold, and hands it
a :class:`Readable`: the clear text of every sealed text the events carry (``None`` when
its data key is destroyed or missing, or the ciphertext does not authenticate), their
personal fields, and which memories are tombstoned. It opens keys as they are at the
time of the call, so a fold over an old part of the log sees what a replay would see.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import psycopg
from pydantic import ValidationError

from contracts import (
    PERSONAL_CONTEXT,
    Event,
    MemoryRedacted,
    MemoryReinstated,
    MemoryWritten,
    PersonalFields,
    SealedText,
    SummaryDerived,
    touched_memories,
)
from ledger.crypto import Keyring
from ledger.errors import CorruptContentError

log = logging.getLogger(__name__)


@dataclass
class Readable:
    """Sealed fields in clear, and the tombstoned memory ids.

    Attributes:
        texts: sealed memory text -> its clear text, or ``None`` (unreadable); a sealed
            text absent from the mapping is unreadable.
        personal: sealed personal fields -> the parsed ``PersonalFields``, or ``None``.
        tombstoned: memory ids the tombstone registry names (erased).
    """

    texts: dict[SealedText, str | None] = field(default_factory=dict)
    personal: dict[SealedText, PersonalFields | None] = field(default_factory=dict)
    tombstoned: set[str] = field(default_factory=set)

    def extend(self, other: Readable) -> None:
        """Add what ``other`` read (for a fold that reads the log a batch at a time)."""
        self.texts.update(other.texts)
        self.personal.update(other.personal)
        self.tombstoned |= other.tombstoned

    def text(self, sealed: SealedText) -> str | None:
        """The clear text of ``sealed``, or ``None``."""
        return self.texts.get(sealed)

    def fields(self, sealed: SealedText | None) -> PersonalFields | None:
        """The personal fields sealed in ``sealed``, or ``None`` (none carried, unreadable)."""
        return None if sealed is None else self.personal.get(sealed)


def sealed_fields(events: Iterable[Event]) -> tuple[list[SealedText], list[SealedText]]:
    """The sealed texts and sealed personal fields the stores read from ``events``:
    those of ``MemoryWritten``, ``SummaryDerived``, ``MemoryRedacted`` and
    ``MemoryReinstated``."""
    texts: list[SealedText] = []
    personal: list[SealedText] = []
    for event in events:
        if isinstance(event, MemoryWritten | SummaryDerived):
            texts.append(event.memory.content)
            personal.append(event.memory.personal)
        elif isinstance(event, MemoryRedacted | MemoryReinstated):
            texts.append(event.content)
            if event.personal is not None:
                personal.append(event.personal)
    return texts, personal


def read_sealed(
    conn: psycopg.Connection,
    keyring: Keyring,
    events: Sequence[Event],
    erased_among: Callable[[Sequence[str]], set[str]],
) -> Readable:
    """Open every sealed field of ``events`` with today's keys and look up which of their
    memories (and of a summary's sources) are tombstoned (``erased_among``, e.g. ``ContentAccess.erased_among``: the
    table and, in the distributed mode, the topic).

    Raises:
        psycopg.Error: the key store cannot be read; whatever ``erased_among`` raises.
    """
    sealed_texts, sealed_personal = sealed_fields(events)
    texts: dict[SealedText, str | None] = {}
    for sealed in dict.fromkeys(sealed_texts):
        texts[sealed] = _open(conn, keyring, sealed, None)
    personal: dict[SealedText, PersonalFields | None] = {}
    for sealed in dict.fromkeys(sealed_personal):
        plain = _open(conn, keyring, sealed, PERSONAL_CONTEXT)
        try:
            personal[sealed] = None if plain is None else PersonalFields.model_validate_json(plain)
        except ValidationError as exc:
            log.error("reference: personal fields under key %s do not parse: %s", sealed.key_id, exc)
            personal[sealed] = None
    ids = [r.memory_id for e in events for r in touched_memories(e)]
    ids += [m for e in events if isinstance(e, SummaryDerived) for m in e.memory.provenance.derived_from]
    ids = list(dict.fromkeys(ids))
    return Readable(texts, personal, set(erased_among(ids)) if ids else set())


def _open(conn: psycopg.Connection, keyring: Keyring, sealed: SealedText, context: str | None) -> str | None:
    try:
        return keyring.open(conn, sealed, context)
    except CorruptContentError as exc:
        log.error("reference: %s", exc)
        return None
