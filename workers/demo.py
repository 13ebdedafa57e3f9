"""The bundled demo scenario, run on the embedded default: write, recall, supersede,
derive a summary, erase, trace, replay, and show that nothing erased comes back."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from contracts import PERSONAL_CONTEXT, EraseMemories, MemoryWrite, MemoryWritten, decode_event, utc_now
from ledger.eventlog import read_all
from projections.trace import render_text, trace
from projections.wording import counted
from workers.bootstrap import PROJECTION_NAMES, Services, build
from workers.settings import Settings

SUBJECT = "alice"
PURPOSE = "technical_writing"


def _write(svc: Services, content: str, **fields: object) -> str:
    now = utc_now()
    body: dict[str, object] = {
        "subject_id": SUBJECT,
        "kind": "preference",
        "content": content,
        "purpose": PURPOSE,
        "scope": {"type": "subject", "id": SUBJECT},
        "provenance": {"writer": "demo-agent", "written_at": now, "turn_id": f"turn-{now.timestamp():.0f}"},
        "confirmed": True,
    }
    body.update(fields)
    result = svc.ledger.write(svc.principal(), MemoryWrite.model_validate(body))
    assert result.memory_id is not None
    return result.memory_id


def _recall(svc: Services, console: Console, query: str, **kw: object) -> list[str]:
    svc.catch_up()
    result = svc.recall.recall(svc.principal(), SUBJECT, PURPOSE, query, utc_now(), k=5, **kw)  # type: ignore[arg-type]
    found = counted(len(result.items), "item") + (" (cache)" if result.cached else "")
    console.print(f'  recall "{query}" -> {found}')
    for item in result.items:
        console.print(
            f"    {item.score:.4f} [{item.kind}] {item.content}  (rev {item.revision}, by {item.provenance['writer']})"
        )
    return [i.memory_id for i in result.items]


DEFAULT_DEMO_DIR = Path(".memledger-demo")
"""Where ``memledger demo`` runs unless told otherwise (wiped on every run)."""

DEMO_MARKER = ".memledger-demo"
"""The file that marks a directory as the demo's own (the demo wipes only such a one)."""


def check_demo_dir(data_dir: Path) -> None:
    """Refuse a ``data_dir`` the demo may not wipe: one that exists, is not empty and
    lacks ``DEMO_MARKER`` (a real ledger, say).

    Raises:
        ValueError: naming ``data_dir`` and the rule.
    """
    if data_dir.exists() and any(data_dir.iterdir()) and not (data_dir / DEMO_MARKER).exists():
        raise ValueError(
            f"data_dir: {data_dir} is not empty and was not made by the demo; the demo wipes its directory,"
            " give a new one"
        )


def run_demo(data_dir: Path, embedder: str = "minilm") -> bool:
    """Run the scenario in a fresh ``data_dir`` (wiped first: callers check it with
    ``check_demo_dir``); returns True when every check held."""
    console = Console(
        highlight=False, soft_wrap=True, markup=False
    )  # data is printed as it is: "[fact]", "[gdpr-art-17]"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    (data_dir / DEMO_MARKER).write_text("made by memledger demo: wiped by the next run\n", encoding="utf-8")
    console.print(f"[bold]memory-ledger demo[/bold] (embedded default, data in {escape(str(data_dir))})", markup=True)
    console.print("1. starting the embedded stores: PostgreSQL, Qdrant engine, Redis")
    svc = build(Settings(data_dir=data_dir, embedder=embedder))
    checks: list[tuple[str, bool]] = []
    try:
        console.print("2. an agent writes what it learned about alice")
        pref = _write(svc, "Alice prefers short answers without preamble", key="answer_length")
        fact = _write(svc, "Alice runs PostgreSQL 16 and Kafka in production", kind="fact")
        _write(
            svc, "For the Q3 board deck, Alice wants bullet points only", scope={"type": "document", "id": "q3-deck"}
        )
        later = utc_now() + timedelta(days=30)
        _write(
            svc,
            "Alice is probably a backend engineer",
            kind="inference",
            confirmed=False,
            veracity="inferred",
            provenance={"writer": "demo-agent", "written_at": utc_now(), "derived_from": [fact]},
            retention={"basis": "session", "expires_at": later},
        )
        ids = _recall(svc, console, "how long should answers about our database setup be")
        checks.append(("recall leaves out the document-scoped and unconfirmed memories", len(ids) == 2))

        console.print("3. alice changes her mind: the preference is superseded")
        new_pref = svc.ledger.supersede(
            svc.principal(),
            pref,
            MemoryWrite.model_validate(
                {
                    "subject_id": SUBJECT,
                    "kind": "preference",
                    "key": "answer_length",
                    "purpose": PURPOSE,
                    "content": "Alice now prefers detailed answers with code examples",
                    "scope": {"type": "subject", "id": SUBJECT},
                    "confirmed": True,
                    "provenance": {"writer": "demo-agent", "written_at": utc_now()},
                }
            ),
        ).memory_id
        ids = _recall(svc, console, "how long should answers be")
        checks.append(("only the new preference is recalled", new_pref in ids and pref not in ids))

        console.print("4. a summary is derived from both memories")
        svc.ledger.write(
            svc.principal(),
            MemoryWrite.model_validate(
                {
                    "subject_id": SUBJECT,
                    "kind": "summary",
                    "purpose": PURPOSE,
                    "content": "Alice: detailed answers with code; runs PostgreSQL and Kafka",
                    "scope": {"type": "subject", "id": SUBJECT},
                    "provenance": {
                        "writer": "demo-summariser",
                        "written_at": utc_now(),
                        "derived_from": [new_pref, fact],
                    },
                }
            ),
        )
        svc.catch_up()

        console.print("5. alice asks to erase the PostgreSQL fact (derived memories go with it)")
        erased = svc.ledger.erase(
            svc.principal(),
            EraseMemories(subject_id=SUBJECT, memory_ids=(fact,), reason="subject request via support ticket"),
        )
        assert erased.request_id is not None
        gone = counted(len(erased.affected), "memory", "memories")
        console.print(f"  request {erased.request_id}: {gone}, data keys destroyed")
        svc.catch_up()
        ids = _recall(svc, console, "PostgreSQL Kafka production")
        checks.append(("the erased fact is not recalled", fact not in ids))

        console.print("6. trace of the erasure, store by store")
        report = trace(svc.pool, erased.request_id, svc.trace_targets())
        console.print(render_text(report))
        checks.append(("trace verdict complete", report.verdict == "complete"))

        console.print("7. replay every projection from offset 0 into fresh targets")
        for name in PROJECTION_NAMES:
            proj = svc.projections[name]
            proj.reset()
            n = svc.runner(name).catch_up(svc.log)
            console.print(f"  {proj.id}: {n} events replayed")
        report = trace(svc.pool, erased.request_id, svc.trace_targets())
        console.print(
            f"  after replay: trace verdict {report.verdict}; probes: "
            + ", ".join(f"{s.store} {s.probe}" for s in report.stores)
        )
        ids = _recall(svc, console, "PostgreSQL Kafka production")
        checks.append(("nothing erased came back after replay", fact not in ids and report.verdict != "failed"))

        console.print("8. the log keeps the events, but the erased content and personal fields are unreadable")
        with svc.pool.connection() as conn:
            for record in read_all(svc.log):
                event = decode_event(record.value)
                if isinstance(event, MemoryWritten) and event.memory_id == fact:
                    text = svc.keyring.open(conn, event.memory.content)
                    personal = svc.keyring.open(conn, event.memory.personal, PERSONAL_CONTEXT)
                    console.print(
                        f"  offset {record.offset}: MemoryWritten {fact}: content -> {text!r},"
                        f" key, scope id and references -> {personal!r}"
                    )
                    checks.append(("the log copy cannot be decrypted", text is None and personal is None))
    finally:
        svc.close()
    console.print("9. memledger serve for a moment: one write and one recall over HTTP")
    from workers.demo_serve import over_http

    checks.append(("a write over HTTP is recalled at once", over_http(data_dir, embedder, SUBJECT, PURPOSE, console)))
    console.print("")
    for label, ok in checks:
        console.print(f"  [{'green' if ok else 'red'}]{'ok  ' if ok else 'FAIL'}[/] {escape(label)}", markup=True)
    passed = all(ok for _, ok in checks)
    console.print("[bold]demo finished[/bold]: " + ("every check held" if passed else "a check FAILED"), markup=True)
    return passed
