"""Event histories for the property tests of the reference fold, made by the real
``Ledger`` from commands that hypothesis draws (so every history is one production could
write: revisions, supersessions, conflicts, regenerated summaries, destroyed keys and the
earlier versions an erasure reinstates come from the ledger's own rules, not from a
test's idea of them).

One ``LedgerStage`` serves every example of a test function: its database, key store and
in-memory log are shared, and each example works on subjects of its own under a principal
granted only those subjects (so ``sweep`` touches nothing of another example). A command
the ledger refuses (an ``InvalidCommandError``) writes nothing and is skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from contracts import (
    EraseMemories,
    Event,
    MemorySuperseded,
    MemoryWrite,
    RedactMemory,
    RevokeConsent,
    SummaryDerived,
    decode_event,
    utc_now,
)
from contracts import MemoryWritten as Written
from ledger.crypto import Keyring
from ledger.errors import InvalidCommandError
from ledger.eventlog import InMemoryEventLog, LogPosition, partition_for
from ledger.principals import Grant, Principal
from ledger.service import Ledger
from tests.builders import PURPOSE

TEXTS = (
    "Alice prefers short answers",
    "Alice prefers detailed answers",
    "Alice deploys with Kubernetes",
    "Alice works at Acme",
    "Alice works at Globex",
)
"""A small vocabulary, so that restatements (reinforcements) and slot rivals happen."""

KEYS = (None, "answer_length", "employer")
SOURCES = (("stated", None), ("imported", "doc-a"), ("imported", "doc-b"))
"""(veracity, source_ref): a statement supersedes its slot; two documents conflict."""

COMMANDS = (
    "write",
    "write",
    "write",
    "supersede",
    "supersede",
    "confirm",
    "summary",
    "summary",
    "redact",
    "revoke",
    "sweep",
    "erase",
    "erase_replacement",
    "erase_replacement",
    "erase_source",
    "erase_subject",
)
"""What an example's steps are drawn from (writes, supersessions, summaries and
``erase_replacement`` weighted; that one erases a memory that superseded another, which
reinstates the version it replaced)."""


def subject_in(index: int, partition: int, partitions: int) -> str:
    """A new subject id ``s<index>-<random hex>`` whose events go to ``partition``."""
    while True:
        name = f"s{index}-{uuid.uuid4().hex[:10]}"
        if partition_for(name, partitions) == partition:
            return name


class Clock:
    """The ledger's clock: UTC, one second further at each command; ``jump`` moves it."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def jump(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class LedgerStage:
    """The real ledger on a test database with an in-memory log of ``partitions``."""

    pool: ConnectionPool
    keyring: Keyring
    partitions: int = 2
    clock: Clock = field(default_factory=Clock)
    log: InMemoryEventLog = field(init=False)
    ledger: Ledger = field(init=False)
    _read: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.log = InMemoryEventLog(self.partitions)
        self.ledger = Ledger(self.pool, self.log, self.keyring, clock=self.clock)

    def new_records(self) -> list[tuple[Event, LogPosition]]:
        """The events appended since the last call, in log order per partition."""
        out: list[tuple[Event, LogPosition]] = []
        for partition, end in self.log.end_offsets().items():
            start = self._read.get(partition, 0)
            for record in self.log.read(partition, start, end - start):
                out.append((decode_event(record.value), record.position))
            self._read[partition] = end
        return out


@dataclass
class History:
    """One example's subjects, principal, and the memories written so far per subject."""

    stage: LedgerStage
    subjects: tuple[str, ...]
    principal: Principal
    memories: dict[str, list[str]]
    commands: list[str] = field(default_factory=list)
    replacements: dict[str, list[str]] = field(default_factory=dict)
    """Per subject, the memories that superseded another, in the order they did."""

    @classmethod
    def start(cls, stage: LedgerStage, data: st.DataObject) -> History:
        """Two new subjects, in one partition or in two (as drawn): names are random, so
        no example meets another's data, but chosen so that the partitions and the order
        of the subjects (the ledger sorts by subject id) are the same each time
        hypothesis runs the example again."""
        stage.new_records()  # whatever an earlier example left unread (it failed mid-command)
        shared = data.draw(st.booleans(), label="subjects share a partition")
        names = tuple(subject_in(i, 0 if shared else i % stage.partitions, stage.partitions) for i in range(2))
        principal = Principal(id=f"p-{names[0]}", grants=(Grant(subjects=names, actions=("read", "write", "erase")),))
        stage.clock.jump(timedelta(seconds=1))
        return cls(stage, names, principal, {s: [] for s in names})

    def run(self, data: st.DataObject, command: str) -> list[tuple[Event, LogPosition]]:
        """Run one drawn command through the ledger; returns the events it appended
        (none when the ledger refused it)."""
        self.stage.clock.tick()
        # mostly the first subject, so that one subject's history gets long enough to
        # hold summaries of superseded sources; the second one interleaves with it
        subject = self.subjects[data.draw(st.sampled_from((0, 0, 0, 1)), label="subject")]
        action: Callable[[st.DataObject, str], Any] = getattr(self, f"_{command}")
        try:
            action(data, subject)
            self.commands.append(command)
        except InvalidCommandError as exc:
            self.commands.append(f"{command} (refused: {exc})")
        new = self.stage.new_records()
        for event, _ in new:
            if isinstance(event, Written | SummaryDerived):
                self.memories[event.subject_id].append(event.memory_id)
            elif isinstance(event, MemorySuperseded):
                self.replacements.setdefault(event.subject_id, []).append(event.superseded_by)
        return new

    # -- the commands -------------------------------------------------------------------

    def _memory(self, data: st.DataObject, subject: str) -> str | None:
        known = self.memories[subject]
        return data.draw(st.sampled_from(known), label="memory") if known else None

    def _command(self, data: st.DataObject, subject: str, **fields: Any) -> MemoryWrite:
        now = self.stage.clock.now
        veracity, source = data.draw(st.sampled_from(SOURCES), label="source")
        consent = data.draw(st.sampled_from((None, "c-1")), label="consent")
        short = data.draw(st.booleans(), label="short retention")
        provenance = {
            "writer": "agent",
            "written_at": now,
            "turn_id": f"t-{data.draw(st.integers(1, 3), label='turn')}",
            "source_ref": source,
            "consent_ref": consent,
            **fields.pop("provenance", {}),
        }
        body: dict[str, Any] = {
            "subject_id": subject,
            "kind": "preference",
            "content": data.draw(st.sampled_from(TEXTS), label="text"),
            "purpose": PURPOSE,
            "scope": {"type": "subject", "id": subject},
            "provenance": provenance,
            "veracity": veracity,
            "confirmed": True,
            "key": data.draw(st.sampled_from(KEYS), label="key"),
        }
        if short:
            body["retention"] = {"expires_at": now + timedelta(days=2), "basis": "session"}
        return MemoryWrite.model_validate(body | fields)

    def _write(self, data: st.DataObject, subject: str) -> None:
        kind = data.draw(st.sampled_from(("preference", "fact", "inference")), label="kind")
        fields: dict[str, Any] = {"kind": kind}
        if kind == "inference":
            source = self._memory(data, subject)
            if source is None:
                fields["kind"] = "fact"
            else:
                fields["provenance"] = {"derived_from": [source]}
                fields["confirmed"] = data.draw(st.booleans(), label="confirmed")
                fields["veracity"] = "inferred"
        self.stage.ledger.write(self.principal, self._command(data, subject, **fields))

    def _supersede(self, data: st.DataObject, subject: str) -> None:
        old = self._memory(data, subject)
        if old is None:
            return
        head = self.stage.ledger.head(self.principal, subject, old)
        if head.kind in ("summary", "inference"):
            return
        cmd = self._command(data, subject, kind=head.kind, key=head.key, veracity="stated")
        self.stage.ledger.supersede(self.principal, old, cmd)

    def _confirm(self, data: st.DataObject, subject: str) -> None:
        memory = self._memory(data, subject)
        if memory is not None:
            self.stage.ledger.confirm(self.principal, subject, memory)

    def _summary(self, data: st.DataObject, subject: str) -> None:
        known = self.memories[subject]
        if not known:
            return
        sources = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=2, unique=True), label="sources")
        cmd = self._command(
            data, subject, kind="summary", key=None, veracity="inferred", provenance={"derived_from": sources}
        )
        self.stage.ledger.write(self.principal, cmd)

    def _redact(self, data: st.DataObject, subject: str) -> None:
        memory = self._memory(data, subject)
        if memory is not None:
            replacement = f"[redacted] {data.draw(st.sampled_from(TEXTS), label='replacement')}"
            self.stage.ledger.redact(self.principal, subject, RedactMemory(memory_id=memory, replacement=replacement))

    def _revoke(self, data: st.DataObject, subject: str) -> None:
        self.stage.ledger.revoke_consent(self.principal, RevokeConsent(subject_id=subject, consent_ref="c-1"))

    def _sweep(self, data: st.DataObject, subject: str) -> None:
        later = self.stage.clock.now + timedelta(days=3)
        self.stage.ledger.sweep(self.principal, later)
        self.stage.clock.jump(timedelta(days=3))

    def _erase(self, data: st.DataObject, subject: str) -> None:
        memory = self._memory(data, subject)
        if memory is not None:
            self._erase_one(data, subject, memory)

    def _erase_one(self, data: st.DataObject, subject: str, memory: str) -> None:
        with_history = data.draw(st.booleans(), label="with history")
        cmd = EraseMemories(subject_id=subject, memory_ids=(memory,), reason="subject asked", with_history=with_history)
        self.stage.ledger.erase(self.principal, cmd)

    def _erase_replacement(self, data: st.DataObject, subject: str) -> None:
        """Erase a memory that superseded another (its earlier version is reinstated
        unless the erasure takes the history too); when the subject has none yet, a keyed
        memory and one or two supersessions are written first, and of a chain of three
        (``A <- B <- C``) the middle one is erased before the last (which reinstates
        ``A``, not its direct predecessor)."""
        known = self.replacements.get(subject, [])
        if known:
            self._erase_one(data, subject, data.draw(st.sampled_from(known), label="replacement"))
            return
        first = self.stage.ledger.write(self.principal, self._command(data, subject, key="answer_length"))
        if first.memory_id is None:
            return
        chain = [first.memory_id]
        for _ in range(data.draw(st.integers(1, 2), label="supersessions")):
            cmd = self._command(data, subject, key="answer_length", veracity="stated")
            later = self.stage.ledger.supersede(self.principal, chain[-1], cmd)
            if later.memory_id is None or later.memory_id == chain[-1]:
                return
            chain.append(later.memory_id)
        for replacement in chain[1:]:
            self._erase_one(data, subject, replacement)

    def _erase_source(self, data: st.DataObject, subject: str) -> None:
        source = data.draw(st.sampled_from(("doc-a", "t-1", "t-2")), label="erased source")
        self.stage.ledger.erase(self.principal, EraseMemories(subject_id=subject, source_ref=source, reason="asked"))

    def _erase_subject(self, data: st.DataObject, subject: str) -> None:
        self.stage.ledger.erase(self.principal, EraseMemories(subject_id=subject, whole_subject=True, reason="asked"))
