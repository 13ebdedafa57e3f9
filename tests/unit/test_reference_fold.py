"""The reference fold's rules without I/O (its sealed fields given as plain data), and the
revision marks the stores keep (``projections.marks``): an older event after a newer one
changes nothing, erasures always apply, a replay reads only what today's keys open."""

from __future__ import annotations

import base64
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import (
    ConflictDetected,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemoryReinstated,
    MemorySuperseded,
    MemoryWritten,
    PersonalFields,
    SealedText,
    SummaryDerived,
)
from contracts.events import RedactedState
from ledger.eventlog import LogPosition
from projections import marks
from projections.reference import Mark, Readable, ReferenceFold

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
A, B, S, S2 = (str(uuid.uuid5(uuid.NAMESPACE_URL, f"memory-{n}")) for n in ("a", "b", "s", "s2"))
_counter = itertools.count()


def sealed(key_id: str) -> SealedText:
    n = next(_counter)
    return SealedText(
        key_id=key_id,
        nonce=base64.urlsafe_b64encode(n.to_bytes(12, "big")).decode(),
        ciphertext=base64.urlsafe_b64encode(bytes(16) + n.to_bytes(4, "big")).decode(),
    )


class Log:
    """Events of subject alice, with what today's keys open (``readable``)."""

    def __init__(self) -> None:
        self.readable = Readable()
        self.events: list[Event] = []

    def env(self) -> dict[str, Any]:
        n = len(self.events)
        return {
            "event_id": f"e{n}",
            "occurred_at": T0 + timedelta(seconds=n),
            "subject_id": "alice",
            "producer": "test",
            "correlation_id": "c",
        }

    def add(self, event: Event) -> Event:
        self.events.append(event)
        return event

    def body(self, memory_id: str, text: str | None, kind: str = "fact", derived: tuple[str, ...] = ()) -> MemoryBody:
        content, personal = sealed(memory_id), sealed(memory_id)
        self.readable.texts[content] = text
        self.readable.personal[personal] = None if text is None else PersonalFields(scope_id="alice", turn_id="t-1")
        return MemoryBody.model_validate(
            {
                "kind": kind,
                "content": content,
                "personal": personal,
                "purpose": "p",
                "scope_type": "subject",
                "provenance": {"writer": "w", "written_at": T0, "derived_from": list(derived)},
                "confidence": 0.8,
                "content_hmac": f"hmac-{text}",
            }
        )

    def write(self, memory_id: str, text: str | None = "x") -> Event:
        return self.add(MemoryWritten(**self.env(), memory_id=memory_id, memory=self.body(memory_id, text)))

    def summary(self, memory_id: str, sources: tuple[str, ...], replaces: str | None = None) -> Event:
        body = self.body(memory_id, "a summary", "summary", sources)
        return self.add(SummaryDerived(**self.env(), memory_id=memory_id, memory=body, replaces=replaces))

    def supersede(self, memory_id: str, revision: int, by: str) -> Event:
        return self.add(MemorySuperseded(**self.env(), memory_id=memory_id, revision=revision, superseded_by=by))

    def redact(self, memory_id: str, revision: int, text: str, kind: str = "fact") -> Event:
        content, personal = sealed(f"{memory_id}/{revision}"), sealed(f"{memory_id}/{revision}")
        self.readable.texts[content] = text
        self.readable.personal[personal] = PersonalFields(scope_id="alice", turn_id="t-1")
        state = RedactedState(status="active", kind=kind, purpose="p", scope_type="subject")  # type: ignore[arg-type]
        return self.add(
            MemoryRedacted(
                **self.env(),
                memory_id=memory_id,
                revision=revision,
                fields=("content",),
                content=content,
                content_hmac=f"hmac-{text}",
                state=state,
                personal=personal,
            )
        )

    def reinstate(self, memory_id: str, revision: int, replacement: str, text: str = "x") -> Event:
        content, personal = sealed(memory_id), sealed(memory_id)
        self.readable.texts[content] = text
        self.readable.personal[personal] = PersonalFields(scope_id="alice", turn_id="t-1")
        state = RedactedState(status="needs_confirmation", kind="fact", purpose="p", scope_type="subject")
        return self.add(
            MemoryReinstated(
                **self.env(),
                memory_id=memory_id,
                revision=revision,
                replacement=replacement,
                content=content,
                personal=personal,
                state=state,
                content_hmac=f"hmac-{text}",
            )
        )

    def erase(self, *refs: tuple[str, int]) -> Event:
        affected = tuple(MemoryRef(memory_id=m, revision=r) for m, r in refs)
        return self.add(
            ErasureRequested(
                **self.env(),
                request_id="er-1",
                request_kind="memories",
                requested_by="t",
                reason="asked",
                legal_basis="gdpr-art-17",
                affected=affected,
            )
        )

    def fold(self, *deliveries: Event) -> ReferenceFold:
        """Fold ``deliveries`` (default: the log in order), each at its own offset."""
        chosen = deliveries or tuple(self.events)
        return ReferenceFold(self.readable).fold((e, LogPosition(0, n)) for n, e in enumerate(chosen))


def test_an_older_write_after_the_supersession_changes_nothing() -> None:
    log = Log()
    written = log.write(A)
    log.supersede(A, 2, by=B)
    once = log.fold()
    again = log.fold(*log.events, written)
    assert A not in once.points and once.facts[A]["status"] == "superseded"
    assert (again.facts, again.history, again.points, again.marks) == (
        once.facts,
        once.history,
        once.points,
        once.marks,
    )
    assert once.marks[A] == marks_of("superseded", 2)


def marks_of(status: str, revision: int) -> Mark:
    return Mark("alice", revision, status)


def test_an_erasure_always_applies_and_a_write_after_it_brings_nothing_back() -> None:
    log = Log()
    written = log.write(A)
    erasure = log.erase((A, 2))
    fold = log.fold(written, erasure, written, erasure)
    assert fold.facts == {} and fold.points == {}
    assert fold.history[(A, 1)]["content_hmac"] is None and fold.history[(A, 2)]["status"] == "erased"
    stale = log.fold(written, log.erase((A, 1)))  # an erasure naming an old revision still removes
    assert stale.facts == {} and stale.points == {}


def test_a_tombstoned_memory_has_no_row_and_no_fingerprint_in_history() -> None:
    log = Log()
    log.write(A)
    log.readable.tombstoned.add(A)
    fold = log.fold()
    assert fold.facts == {} and fold.points == {} and fold.history[(A, 1)]["content_hmac"] is None


def test_a_summary_stays_dropped_and_a_later_one_survives_an_old_redaction() -> None:
    log = Log()
    log.write(A)
    derived = log.summary(S, (A,))
    redaction = log.redact(A, 2, "[redacted]")  # drops s
    log.summary(S2, (A,))  # derived after the redaction
    fold = log.fold(*log.events, derived, redaction)
    assert set(fold.summaries) == {S2}


def test_a_replay_reads_the_redacted_text_only_and_a_redacted_summary_gets_no_point() -> None:
    log = Log()
    log.write(A, text=None)  # its key was destroyed by the redaction
    log.redact(A, 2, "[redacted]")
    log.summary(S, (A,))
    log.redact(S, 2, "[redacted summary]", kind="summary")
    fold = log.fold()
    assert fold.facts[A]["content"] == "[redacted]" and fold.facts[A]["revision"] == 2
    assert fold.points[A].text == "[redacted]" and fold.points[A].payload["content_hmac"] == "hmac-[redacted]"
    assert S not in fold.points and fold.summaries == {}


def test_status_changes_reach_rows_points_and_marks() -> None:
    log = Log()
    log.write(A)
    log.write(B)
    log.add(
        ConflictDetected.model_validate(
            {
                **log.env(),
                "conflict_id": "cf-1",
                "purpose": "p",
                "scope_type": "subject",
                "affected": [{"memory_id": A, "revision": 2}, {"memory_id": B, "revision": 2}],
            }
        )
    )
    log.add(MemoryConfirmed(**log.env(), memory_id=A, revision=3))
    log.add(
        MemoryReinforced(
            **log.env(), memory_id=A, revision=4, confidence=0.9, provenance={"writer": "w", "written_at": T0}
        )
    )
    fold = log.fold()
    assert fold.facts[A]["status"] == "active" and fold.facts[A]["confidence"] == 0.9
    assert fold.points[A].payload["revision"] == 4 and fold.points[B].payload["status"] == "needs_confirmation"
    assert fold.conflicts["cf-1"]["memory_ids"] == [A, B]
    assert fold.marks[A] == marks_of("active", 4) and fold.history[(A, 4)]["status"] is None


def test_a_reinstatement_makes_the_superseded_row_and_point_live_awaiting_confirmation() -> None:
    log = Log()
    written = log.write(A)
    log.supersede(A, 2, by=B)
    log.write(B)
    log.erase((B, 1))
    reinstated = log.reinstate(A, 3, replacement=B)
    fold = log.fold()
    row = fold.facts[A]
    assert (row["status"], row["superseded_by"], row["confirmed"], row["revision"]) == (
        "needs_confirmation",
        None,
        False,
        3,
    )
    assert row["content"] == "x" and B not in fold.facts and B not in fold.points
    point = fold.points[A].payload
    assert (point["status"], point["revision"], point["content_hmac"], point["scope_id"]) == (
        "needs_confirmation",
        3,
        "hmac-x",
        "alice",
    )
    assert fold.marks[A] == marks_of("needs_confirmation", 3)
    assert fold.history[(A, 3)]["status"] == "needs_confirmation" and fold.history[(A, 3)]["content_hmac"] is None
    again = log.fold(*log.events, written, reinstated)  # delivered again after: changes nothing
    assert (again.facts, again.points, again.marks) == (fold.facts, fold.points, fold.marks)


def test_a_reinstatement_of_a_tombstoned_or_unreadable_memory_makes_no_point() -> None:
    log = Log()
    log.write(A)
    log.supersede(A, 2, by=B)
    reinstated = log.reinstate(A, 3, replacement=B)
    assert isinstance(reinstated, MemoryReinstated)
    log.readable.tombstoned.add(A)
    gone = log.fold()
    assert A not in gone.facts and A not in gone.points and gone.history[(A, 3)]["status"] == "needs_confirmation"
    log.readable.tombstoned.clear()
    log.readable.texts[reinstated.content] = None
    unreadable = log.fold()
    assert unreadable.facts[A]["status"] == "needs_confirmation" and A not in unreadable.points


# -- the stores' marks ---------------------------------------------------------------------


def test_a_mark_book_passes_only_newer_revisions_and_erasures_always_apply() -> None:
    log = Log()
    written, superseded = log.write(A), log.supersede(A, 2, by=B)
    book = marks.MarkBook()
    for event in (written, superseded):
        fresh = book.fresh(event)
        assert marks.applies(event, fresh)
        book.advance(event, fresh)
    assert book.fresh(written) == () and not marks.applies(written, ())
    assert book.changed() == {A: marks.Mark("alice", 2, "superseded")}
    erasure = log.erase((A, 1))
    assert book.fresh(erasure) == () and marks.applies(erasure, ())


def test_mark_status_follows_the_reference() -> None:
    log = Log()
    events = [
        log.write(A),
        log.summary(S, (A,)),
        log.redact(A, 2, "r"),
        log.supersede(A, 3, by=B),
        log.reinstate(A, 4, replacement=B),
    ]
    fold = ReferenceFold(log.readable)
    book = marks.MarkBook()
    for n, event in enumerate(events):
        fold.apply(event, LogPosition(0, n))
        book.advance(event, book.fresh(event))
    assert {m: (k.revision, k.status) for m, k in book.changed().items()} == {
        m: (k.revision, k.status) for m, k in fold.marks.items()
    }
