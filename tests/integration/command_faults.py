"""What the fault-injection tests of the ledger's commands share: each command prepared
and run on its own subject, the fault points, and the check that the log, the ledger's
state, the keys and every store agree.

Run as ``python -m tests.integration.command_faults COMMAND STEP SUBJECT PREPARED`` with
the ``MEMLEDGER_*`` environment of the services, it runs one command and kills itself
with SIGKILL at ``STEP`` (``staged``, ``committed``, or ``sent``: after the log
acknowledged the events, before the outbox rows are deleted).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from contracts import (
    EraseMemories,
    RedactMemory,
    RevokeConsent,
    decode_event,
    touched_memories,
)
from ledger.eventlog import read_all
from ledger.service import CommandResult
from tests.builders import memory_write
from workers.bootstrap import Services, build

COMMANDS = ("write", "supersede", "redact", "revoke", "erase")


def prepare(svc: Services, command: str, subject: str) -> list[str]:
    """Write what ``command`` acts on (memories of ``subject``); returns their ids."""
    p = svc.principal()
    if command == "write":
        return []
    first = svc.ledger.write(
        p, memory_write(subject, f"{subject} drinks green tea", key="tea", provenance=_provenance(consent_ref="c-1"))
    )
    second = svc.ledger.write(p, memory_write(subject, f"{subject} reads at night", key="reading"))
    assert first.memory_id and second.memory_id
    return [first.memory_id, second.memory_id]


def _provenance(**extra: Any) -> dict[str, Any]:
    return {"writer": "test-agent", "written_at": "2026-11-01T00:00:00Z", "turn_id": "t-1", **extra}


def run(svc: Services, command: str, subject: str, prepared: list[str]) -> CommandResult:
    """Run ``command`` on ``subject`` (after ``prepare``)."""
    p = svc.principal()
    if command == "write":
        return svc.ledger.write(p, memory_write(subject, f"{subject} likes black coffee", key="coffee"))
    if command == "supersede":
        return svc.ledger.supersede(p, prepared[0], memory_write(subject, f"{subject} drinks oolong", key="tea"))
    if command == "redact":
        return svc.ledger.redact(p, subject, RedactMemory(memory_id=prepared[0], replacement="[tea redacted]"))
    if command == "revoke":
        return svc.ledger.revoke_consent(p, RevokeConsent(subject_id=subject, consent_ref="c-1"))
    assert command == "erase"
    return svc.ledger.erase(p, EraseMemories(subject_id=subject, memory_ids=(prepared[0],), reason="asked"))


def ledger_state(svc: Services, subject: str) -> dict[str, tuple[int, str]]:
    """The ledger's heads of ``subject``: memory id -> (revision, status)."""
    with svc.pool.connection() as conn:
        rows = conn.execute(
            "SELECT memory_id, revision, status FROM ledger_memories WHERE subject_id = %s", (subject,)
        ).fetchall()
    return {str(m): (int(r), str(s)) for m, r, s in rows}


def log_events(svc: Services, subject: str) -> Counter[str]:
    """How often each event of ``subject`` is in the log, by event id."""
    return Counter(decode_event(r.value).event_id for r in read_all(svc.log) if r.key == subject)


def assert_agree(svc: Services, subject: str) -> Counter[str]:
    """Publish what the outbox holds, run every projection to the end of the log, then
    check that the log, the ledger's heads, the keys, facts (and its history), vectors and
    summaries agree on ``subject``. Returns the log's event counts (duplicates > 1)."""
    svc.ledger.relay_pending()
    with svc.pool.connection() as conn:
        left = conn.execute("SELECT count(*) FROM ledger_outbox WHERE subject_id = %s", (subject,)).fetchone()
    assert left == (0,), "the outbox still holds events of the subject"
    svc.catch_up()
    heads = ledger_state(svc, subject)
    events = {}
    for record in read_all(svc.log):
        if record.key == subject:
            event = decode_event(record.value)
            events[event.event_id] = event
    folded: dict[str, int] = {}
    for event in events.values():
        for ref in touched_memories(event):
            folded[ref.memory_id] = max(folded.get(ref.memory_id, 0), ref.revision)
    assert folded == {m: r for m, (r, _) in heads.items()}, "the log and the ledger's heads disagree"
    with svc.pool.connection() as conn:
        facts = {
            str(m): (int(r), str(s))
            for m, r, s in conn.execute(
                "SELECT memory_id, revision, status FROM facts_v1 WHERE subject_id = %s", (subject,)
            )
        }
        history = conn.execute(
            "SELECT memory_id, revision FROM facts_history_v1 WHERE subject_id = %s", (subject,)
        ).fetchall()
        live_keys = {
            str(k)
            for (k,) in conn.execute(
                "SELECT key_id FROM memory_keys WHERE subject_id = %s AND wrapped_key IS NOT NULL", (subject,)
            )
        }
        summaries = conn.execute("SELECT count(*) FROM summaries_v1 WHERE subject_id = %s", (subject,)).fetchone()
    assert facts == {m: v for m, v in heads.items() if v[1] != "erased"}, "facts and the ledger disagree"
    touched = {(ref.memory_id, ref.revision) for e in events.values() for ref in touched_memories(e)}
    assert sorted(history) == sorted(touched), "the history is not one row per revision in the log"
    for memory_id, (_, status) in heads.items():
        holds_key = any(k.split("/")[0] == memory_id for k in live_keys)
        assert holds_key == (status in ("active", "needs_confirmation", "superseded")), (memory_id, status)
    assert svc.index is not None
    points = {m: p.payload["revision"] for m, p in svc.index.retrieve(list(heads)).items()}
    usable = {m: r for m, (r, s) in heads.items() if s in ("active", "needs_confirmation")}
    assert points == usable, "vectors and the ledger disagree"
    assert summaries == (0,)
    return Counter({e: n for e, n in log_events(svc, subject).items()})


FaultHook = Callable[[str, str, Any], None]


def kill_at(step: str) -> FaultHook:
    """A ``Ledger._fault`` replacement that kills this process at ``step``."""

    def fault(command: str, at: str, conn: Any) -> None:
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    return fault


def main(command: str, step: str, subject: str, prepared: list[str]) -> int:
    svc = build()
    if step == "sent":
        send = svc.log.append_batch

        def sent_then_die(items: Any) -> Any:
            positions = send(items)
            os.kill(os.getpid(), signal.SIGKILL)
            return positions

        svc.log.append_batch = sent_then_die  # type: ignore[method-assign]
    else:
        svc.ledger._fault = kill_at(step)  # type: ignore[method-assign]
    run(svc, command, subject, prepared)
    svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
