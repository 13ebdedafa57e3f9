"""LoCoMo to ledger commands: turns, session summaries and observations as ``MemoryWrite``, in batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from contracts import MemoryWrite, Provenance, Retention, Scope
from workers.locomo.data import Conversation

PURPOSE = "conversation_memory"
WRITER = "locomo-ingest"
BATCH_SIZE = 200


# -- the mapping -------------------------------------------------------------------------


def _source_ref(sample_id: str, session: int) -> str:
    return f"locomo:{sample_id}:session_{session}"


def _write(
    conv: Conversation,
    session: int,
    written_at: datetime,
    kind: str,
    content: str,
    *,
    turn_id: str | None = None,
    derived_from: Sequence[str] = (),
    confirmed: bool,
    veracity: str,
) -> MemoryWrite:
    return MemoryWrite.model_validate(
        {
            "subject_id": conv.sample_id,
            "kind": kind,
            "content": content,
            "purpose": PURPOSE,
            "scope": Scope(type="subject", id=conv.sample_id),
            "provenance": Provenance(
                writer=WRITER,
                written_at=written_at,
                turn_id=turn_id,
                source_ref=_source_ref(conv.sample_id, session),
                consent_ref=f"locomo:{conv.sample_id}",
                derived_from=tuple(derived_from),
            ),
            "sensitivity": "personal",
            "retention": Retention(basis="consent"),
            "confirmed": confirmed,
            "veracity": veracity,
        }
    )


def turn_writes(conv: Conversation) -> list[tuple[str, MemoryWrite]]:
    """One ``fact`` per turn, as ``(dia_id, command)`` in turn order.

    The content is :attr:`Turn.document`; ``provenance.turn_id`` is the dia_id,
    ``written_at`` the session's time; stated by the speaker and confirmed.
    """
    return [
        (
            t.dia_id,
            _write(
                conv, s.number, s.date_time, "fact", t.document, turn_id=t.dia_id, confirmed=True, veracity="stated"
            ),
        )
        for s in conv.sessions
        for t in s.turns
    ]


@dataclass(frozen=True)
class DerivedWrites:
    """The commands that refer to turns by memory id, and what could not be mapped.

    ``skipped_summaries``: summaries of a session with no turns; ``skipped_observations``:
    observations none of whose evidence names a written turn; ``dropped_evidence``:
    evidence ids (of observations that were kept) that name no turn.
    """

    summaries: list[MemoryWrite]
    observations: list[MemoryWrite]
    skipped_summaries: int = 0
    skipped_observations: int = 0
    dropped_evidence: int = 0


def derived_writes(conv: Conversation, memory_ids: Mapping[str, str]) -> DerivedWrites:
    """Summaries and observations of ``conv``, wired to the turns' memory ids.

    Args:
        memory_ids: dia_id -> memory id of every written turn (what the ledger assigned).

    A session summary becomes a ``summary`` derived from the memory ids of the session's
    turns (the ledger records it as ``SummaryDerived``); an observation an unconfirmed
    ``inference`` (veracity ``inferred``) derived from its evidence turns' memory ids.
    Both are generated text, so summaries are ``inferred`` and unconfirmed too.
    """
    summaries: list[MemoryWrite] = []
    skipped_summaries = 0
    for number, text in sorted(conv.summaries.items()):
        session = conv.session(number)
        sources = [memory_ids[t.dia_id] for t in session.turns if t.dia_id in memory_ids] if session else []
        if session is None or not sources:
            skipped_summaries += 1
            continue
        summaries.append(
            _write(
                conv,
                number,
                session.date_time,
                "summary",
                text,
                derived_from=sources,
                confirmed=False,
                veracity="inferred",
            )
        )
    observations: list[MemoryWrite] = []
    skipped = dropped = 0
    for obs in conv.observations:
        session = conv.session(obs.session)
        sources = list(dict.fromkeys(memory_ids[e] for e in obs.evidence if e in memory_ids))
        if not sources:
            skipped += 1
            continue
        dropped += sum(1 for e in obs.evidence if e not in memory_ids)
        # An observation of a session with no turns list still has a date only if the
        # session exists; otherwise date it like its latest evidence turn's session.
        when = session.date_time if session is not None else _latest_evidence_time(conv, obs.evidence)
        observations.append(
            _write(
                conv,
                obs.session,
                when,
                "inference",
                obs.text,
                derived_from=sources,
                confirmed=False,
                veracity="inferred",
            )
        )
    return DerivedWrites(summaries, observations, skipped_summaries, skipped, dropped)


def _latest_evidence_time(conv: Conversation, evidence: Iterable[str]) -> datetime:
    wanted = set(evidence)
    times = [s.date_time for s in conv.sessions for t in s.turns if t.dia_id in wanted]
    return max(times) if times else conv.sessions[-1].date_time


@dataclass(frozen=True)
class MappingCounts:
    """What :func:`build_writes` wrote for one conversation (counts of commands)."""

    turns: int
    summaries: int
    observations: int
    skipped_summaries: int
    skipped_observations: int
    dropped_evidence: int
    batches: int


def _chunks(items: Sequence[MemoryWrite], size: int) -> Iterable[list[MemoryWrite]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def build_writes(
    conv: Conversation,
    write_batch: Callable[[list[MemoryWrite]], Sequence[str]],
    batch_size: int = BATCH_SIZE,
) -> MappingCounts:
    """Map ``conv`` to ``MemoryWrite`` batches and hand each to ``write_batch``.

    Memory ids are assigned by the ledger, so this runs in two steps: the turns first
    (batches of at most ``batch_size``), collecting dia_id -> memory id from what
    ``write_batch`` returns, then the summaries and observations that refer to them.

    Args:
        write_batch: writes one batch and returns the memory ids, one per command, in
            order (``[r.memory_id for r in ledger.write_many(principal, batch)]``; a test
            may pass a fake that assigns ids).
        batch_size: commands per batch, at least 1.

    Raises:
        ValueError: ``write_batch`` returned a different number of ids than commands.
        Whatever ``write_batch`` raises (the ledger's errors).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
    batches = 0

    def send(batch: list[MemoryWrite]) -> list[str]:
        nonlocal batches
        ids = list(write_batch(batch))
        batches += 1
        if len(ids) != len(batch):
            raise ValueError(f"write_batch returned {len(ids)} memory ids for {len(batch)} commands")
        return ids

    turns = turn_writes(conv)
    memory_ids: dict[str, str] = {}
    for start in range(0, len(turns), batch_size):
        chunk = turns[start : start + batch_size]
        ids = send([cmd for _, cmd in chunk])
        memory_ids.update((dia_id, mid) for (dia_id, _), mid in zip(chunk, ids, strict=True))
    derived = derived_writes(conv, memory_ids)
    for batch in _chunks([*derived.summaries, *derived.observations], batch_size):
        send(batch)
    return MappingCounts(
        turns=len(turns),
        summaries=len(derived.summaries),
        observations=len(derived.observations),
        skipped_summaries=derived.skipped_summaries,
        skipped_observations=derived.skipped_observations,
        dropped_evidence=derived.dropped_evidence,
        batches=batches,
    )
