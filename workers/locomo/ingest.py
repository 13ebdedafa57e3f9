"""LoCoMo ingest: write the conversations through the ledger (:func:`ingest`, :class:`IngestReport`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contracts import MemoryWrite
from workers.bootstrap import Services
from workers.locomo.data import ATTRIBUTION, AlreadyIngestedError, load_conversations
from workers.locomo.mapping import BATCH_SIZE, build_writes

ProgressFn = Callable[[str, int, int], None]

# -- ingest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestReport:
    """What :func:`ingest` did. ``memories`` counts written memories per kind (``fact``,
    ``summary``, ``inference``); seconds are wall-clock; ``catch_up_seconds`` is ``None``
    when projections were not run here (distributed mode)."""

    path: str
    conversations: int
    memories: dict[str, int]
    events_appended: int
    batches: int
    skipped_summaries: int
    skipped_observations: int
    dropped_evidence: int
    write_seconds: float
    catch_up_seconds: float | None = None
    catch_up_records: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "attribution": ATTRIBUTION}

    def render(self) -> str:
        m = self.memories
        lines = [
            f"Ingested {self.conversations} LoCoMo conversation(s) from {self.path}",
            f"  facts (turns)            {m.get('fact', 0):>7,}",
            f"  summaries                {m.get('summary', 0):>7,}",
            f"  inferences (observations){m.get('inference', 0):>7,}",
            f"  skipped observations     {self.skipped_observations:>7,}  (no evidence naming a turn)",
            f"  dropped evidence ids     {self.dropped_evidence:>7,}  (named no turn; observation kept)",
            f"  events appended          {self.events_appended:>7,}  in {self.batches} batches, "
            f"{self.write_seconds:.1f} s",
        ]
        if self.skipped_summaries:
            lines.append(f"  skipped summaries        {self.skipped_summaries:>7,}  (session without turns)")
        if self.catch_up_seconds is not None:
            lines.append(
                f"  projections caught up    {self.catch_up_records or 0:>7,}  records, {self.catch_up_seconds:.1f} s"
            )
        lines.append(ATTRIBUTION)
        return "\n".join(lines)


def _live_memory_counts(services: Services, subject_ids: Sequence[str]) -> dict[str, int]:
    with services.pool.connection() as conn:
        rows = conn.execute(
            "SELECT subject_id, count(*) FROM ledger_memories"
            " WHERE subject_id = ANY(%s) AND status <> 'erased' GROUP BY subject_id",
            (list(subject_ids),),
        ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def ingest(
    services: Services,
    path: Path,
    progress: ProgressFn | None = None,
    limit: int | None = None,
    batch_size: int = BATCH_SIZE,
) -> IngestReport:
    """Write the LoCoMo conversations at ``path`` into the ledger (see :func:`build_writes`).

    Each conversation's ``sample_id`` is the subject. Commands go through
    ``services.ledger.write_many`` as ``services.principal()``, ``batch_size`` at a time
    (one transaction and one log batch each). In the embedded mode the in-process
    projections are then caught up (``services.catch_up()``), timed separately.

    Args:
        progress: called as ``progress("ingest", conversations_done, conversations_total)``
            after each conversation, and ``progress("project <id>", done, total)`` during the catch-up.
        limit: only the first ``limit`` conversations.

    Raises:
        FileNotFoundError, LocomoFormatError: see :func:`load_conversations` (before
            anything is written).
        AlreadyIngestedError: a subject already has memories that are not erased; it
            names them, and nothing is written. (The check is not atomic with the writes:
            two concurrent ingests of one file are not prevented.)
        NotAuthorisedError: the principal has no ``write`` grant for a subject.
        Ledger errors (``EventLogError`` ...): conversations before the failing batch
            stay written.
    """
    convs = load_conversations(path, limit)
    existing = _live_memory_counts(services, [c.sample_id for c in convs])
    if existing:
        raise AlreadyIngestedError(sorted(existing))
    principal = services.principal()
    events = 0

    def write_batch(batch: list[MemoryWrite]) -> list[str]:
        nonlocal events
        results = services.ledger.write_many(principal, batch)
        events += sum(len(r.events) for r in results)
        ids = [r.memory_id for r in results]
        if any(i is None for i in ids):
            raise RuntimeError("the ledger returned a write result without a memory id")
        return [i for i in ids if i is not None]

    totals = {"fact": 0, "summary": 0, "inference": 0}
    batches = skipped_s = skipped_o = dropped = 0
    started = time.perf_counter()
    for done, conv in enumerate(convs, start=1):
        counts = build_writes(conv, write_batch, batch_size)
        totals["fact"] += counts.turns
        totals["summary"] += counts.summaries
        totals["inference"] += counts.observations
        batches += counts.batches
        skipped_s += counts.skipped_summaries
        skipped_o += counts.skipped_observations
        dropped += counts.dropped_evidence
        if progress is not None:
            progress("ingest", done, len(convs))
    write_seconds = time.perf_counter() - started
    catch_up_seconds: float | None = None
    catch_up_records: int | None = None
    if services.settings.mode == "embedded":
        started = time.perf_counter()
        catch_up_records = services.catch_up(progress)
        catch_up_seconds = time.perf_counter() - started
    return IngestReport(
        path=str(path),
        conversations=len(convs),
        memories=totals,
        events_appended=events,
        batches=batches,
        skipped_summaries=skipped_s,
        skipped_observations=skipped_o,
        dropped_evidence=dropped,
        write_seconds=round(write_seconds, 3),
        catch_up_seconds=None if catch_up_seconds is None else round(catch_up_seconds, 3),
        catch_up_records=catch_up_records,
    )
