"""Erasure against the real stores (Postgres, Redis, Qdrant local engine): erasure by
source, the HTML trace, the erasure report, and re-applying tombstones to a restored
store."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from ledger.errors import InvalidCommandError
from projections.erasure_report import erasure_report
from projections.errors import ProjectionStalledError
from projections.runner import RetryPolicy
from projections.tombstones import STORES, PurgeTargets, reapply_tombstones
from projections.trace import trace
from projections.trace_html import render_html
from projections.vector_index import VectorIndexUnreachableError
from tests.builders import memory_write
from tests.integration.conftest import closed_port, local_settings, one, recall_ids
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration


def provenance(**fields: Any) -> dict[str, Any]:
    return {"writer": "test-agent", "written_at": utc_now(), **fields}


def write(svc: Services, content: str, subject: str = "alice", **prov: Any) -> str:
    mid = svc.ledger.write(svc.principal(), memory_write(subject, content, provenance=provenance(**prov))).memory_id
    assert mid
    return mid


@pytest.mark.parametrize(
    ("source", "field"), [("turn-9", "turn_id"), ("call-4", "tool_call_id"), ("doc:handbook", "source_ref")]
)
def test_erasure_by_source_reaches_every_store_and_cascades_to_derived(svc: Services, source: str, field: str) -> None:
    p = svc.principal()
    gone = write(svc, "Alice's badge number is 90210", **{field: source})
    also = write(svc, "Alice's desk is 4F-17", **{field: source})
    keep = write(svc, "Alice prefers dark mode", turn_id="turn-1")
    bobs = write(svc, "Bob's badge number is 31337", subject="bob", **{field: source})
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: badge 90210, dark mode",
            provenance=provenance(derived_from=[gone, keep]),
        ),
    ).memory_id
    svc.catch_up()
    assert gone in recall_ids(svc, "badge number 90210")
    assert svc.cache is not None and svc.cache.entries("alice")

    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref=source, reason="subject asked"))
    svc.catch_up()

    assert r.request_id and set(r.affected) == {gone, also, summary}
    assert r.events[0].request_kind == "source"  # type: ignore[union-attr]
    assert one(svc, "SELECT source_ref FROM erasure_request_sources WHERE request_id = %s", r.request_id) == source
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete", report
    assert report.request_kind == "source" and report.source_ref == source
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%90210%%' OR content LIKE '%%4F-17%%'") == 0
    # the summary is regenerated from the source that remains
    assert one(svc, "SELECT content, derived_from FROM summaries_v1") == ("Alice prefers dark mode", [keep])
    assert svc.index is not None and svc.index.retrieve([gone, also, summary or ""]) == {}
    assert gone not in recall_ids(svc, "badge number 90210")
    assert keep in recall_ids(svc, "dark mode")
    assert bobs in recall_ids(svc, "badge number", subject="bob")  # another subject's memory of the same source


def test_erasure_by_source_that_names_nothing_is_refused_naming_the_field(svc: Services) -> None:
    p = svc.principal()
    write(svc, "Alice likes tea", turn_id="turn-2")
    with pytest.raises(InvalidCommandError) as info:
        svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-404", reason="asked"))
    assert info.value.field == "source_ref" and "turn-404" in info.value.rule
    svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-2", reason="asked"))
    with pytest.raises(InvalidCommandError, match="already erased") as again:
        svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-2", reason="asked again"))
    assert again.value.field == "source_ref"
    with svc.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM erasure_requests").fetchone() == (1,)


# -- the HTML report, opened in a real headless browser ----------------------------------


def tool(*names: str) -> str:
    """The first of ``names`` on PATH (installed by deploy/install.sh); a missing tool
    skips the test, except under CI, where that is a failure."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    message = f"none of {', '.join(names)} on PATH: run deploy/install.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def chromium() -> str:
    """The system Chromium (Debian ``chromium``)."""
    return tool("chromium", "chromium-browser", "google-chrome")


def dump_dom(browser: str, page: Path, tmp_path: Path) -> str:
    """The DOM Chromium builds from ``page`` (after parsing and layout), as HTML."""
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # root in CI containers
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class _Cells(HTMLParser):
    """Collects the text of each ``<tr>`` (with its attributes) and of ``#verdict``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[dict[str, str | None], list[str]]] = []
        self.verdict: str | None = None
        self.tags: list[str] = []
        self._in_verdict = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "tr":
            self.rows.append((a, []))
        elif tag in ("td", "th") and self.rows:
            self._cell = []
        elif a.get("id") == "verdict":
            self._in_verdict = True
            self.verdict = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1][1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "span":
            self._in_verdict = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_verdict and self.verdict is not None:
            self.verdict += data


def test_html_trace_renders_the_request_every_store_and_the_verdict_in_a_browser(svc: Services, tmp_path: Path) -> None:
    browser = chromium()
    p = svc.principal()
    gone = write(svc, "Alice's passport is X1234567", turn_id="turn-5")
    kept = svc.ledger.write(  # identical text in another scope: another memory, not erased
        p,
        memory_write(
            content="Alice's passport is X1234567",
            scope={"type": "document", "id": "travel-form"},
            provenance=provenance(turn_id="turn-6"),
        ),
    ).memory_id
    assert kept != gone
    svc.catch_up()
    hostile = "<script>document.title='owned'</script> & \"quotes\""
    r = svc.ledger.erase(
        p, EraseMemories(subject_id="alice", source_ref="turn-5", reason=hostile, legal_basis="gdpr-art-17(1)(b)")
    )
    svc.catch_up()
    assert r.request_id
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete"
    facts = next(s for s in report.stores if s.store == "facts")
    assert (facts.probe_found, facts.fingerprint_found) == (0, 1)  # the other memory's identical text
    html = render_html(report)
    assert not re.search(r"https?://|<script|<link|src=|url\(", html), "the report must not load anything"
    page = tmp_path / "trace.html"
    page.write_text(html, encoding="utf-8")

    dom = dump_dom(browser, page, tmp_path)
    cells = _Cells()
    cells.feed(dom)
    assert cells.verdict == "complete"
    assert "script" not in cells.tags  # the hostile reason stayed text
    request = {row[0]: row[1] for _, row in cells.rows if len(row) == 2}
    assert request["Request id"] == r.request_id
    assert request["Kind"] == "source" and request["Source"] == "turn-5"
    assert request["Memories"] == f"1: {gone}" and kept not in request["Memories"]
    assert request["Reason"] == hostile
    assert request["Legal basis"] == "gdpr-art-17(1)(b)"
    assert request["Requested by"] == p.id
    assert request["Log position"] == f"partition {r.positions[0].partition} offset {r.positions[0].offset}"
    stores = {a["data-store"]: (a["data-status"], row) for a, row in cells.rows if a.get("data-store")}
    assert set(stores) == {"facts", "history", "vectors", "cache", "summaries", "log", "dlq", "disk"}
    disk_status, disk_row = stores.pop("disk")  # reported, not judged: nothing compacted yet
    assert (disk_status, disk_row[7]) == ("reported", "residue until compaction (memledger compact)")
    for name, (status, row) in stores.items():
        assert status == "applied" and row[1] == "applied", (name, row)
        assert row[2] != "-" and row[4] != "-" and row[6] != "-", (name, row)  # applied at, offset, latency
        assert row[7] == "absent", (name, row)  # probe by memory id
    assert stores["facts"][1][8] == "1 copy of identical text found"
    assert stores["log"][1][8] == "-"


# -- the erasure report -------------------------------------------------------------------


def test_erasure_report_lists_the_period_with_trace_verdicts(svc: Services) -> None:
    p = svc.principal()
    a = write(svc, "Alice's pin is 1234")
    write(svc, "Bob's pin is 9876", subject="bob", turn_id="turn-b")
    write(svc, "Carol's pin is 5555", subject="carol")
    svc.catch_up()
    before = utc_now()
    first = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(a,), reason="asked"))
    second = svc.ledger.erase(p, EraseMemories(subject_id="bob", source_ref="turn-b", reason="asked"))
    svc.catch_up()  # both applied everywhere
    third = svc.ledger.erase(p, EraseMemories(subject_id="carol", whole_subject=True, reason="asked"))
    # not applied by any projection yet: pending

    report = erasure_report(svc.pool, svc.trace_targets(), before)
    rows = {r.request_id: r for r in report.requests}
    assert list(rows) == [first.request_id, second.request_id, third.request_id]  # oldest first
    assert [(r.subject_id, r.request_kind, r.memories, r.verdict) for r in rows.values()] == [
        ("alice", "memories", 1, "complete"),
        ("bob", "source", 1, "complete"),
        ("carol", "subject", 1, "pending"),
    ]
    for r in rows.values():  # the same verdict as trace gives
        assert r.verdict == trace(svc.pool, r.request_id, svc.trace_targets()).verdict
        assert r.requested_by == p.id
    assert set(rows[third.request_id or ""].pending_stores) == {"facts", "history", "vectors", "cache", "summaries"}
    assert report.totals == {"complete": 2, "pending": 1, "failed": 0}

    assert erasure_report(svc.pool, svc.trace_targets(), before, until=before + timedelta(days=1)).requests
    assert erasure_report(svc.pool, svc.trace_targets(), before + timedelta(days=1)).requests == ()
    only_alice = erasure_report(svc.pool, svc.trace_targets(), before, include=lambda s: s == "alice")
    assert [r.subject_id for r in only_alice.requests] == ["alice"] and only_alice.withheld == 2
    with pytest.raises(ValueError, match=r"^since: must be timezone-aware"):
        erasure_report(svc.pool, svc.trace_targets(), before.replace(tzinfo=None))
    with pytest.raises(ValueError, match=r"^until: must be after since"):
        erasure_report(svc.pool, svc.trace_targets(), before, until=before)


# -- re-applying tombstones to stores restored from a backup --------------------------------


def test_reapply_tombstones_purges_a_store_restored_from_an_old_backup(svc: Services, tmp_path: Path) -> None:
    pg_dump, psql = tool("pg_dump"), tool("psql")
    assert svc.index is not None and svc.cache is not None
    p = svc.principal()
    gone = write(svc, "Alice's phone is 555-0147")
    keep = write(svc, "Alice prefers dark mode")
    svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: dark mode, phone 555-0147",
            provenance=provenance(derived_from=[gone, keep]),
        ),
    )
    svc.catch_up()
    assert gone in recall_ids(svc, "phone 555-0147")  # now cached too
    cached = svc.cache.entries("alice")
    assert cached

    # the backup, taken before the erasure
    dsn = svc.settings.postgres_dsn
    assert dsn
    dump = tmp_path / "stores.sql"
    tables = ("facts_v1", "facts_history_v1", "summaries_v1")
    subprocess.run(
        [pg_dump, "--data-only", *(f"--table={t}" for t in tables), f"--file={dump}", dsn], check=True, timeout=120
    )
    points = list(svc.index.retrieve([gone]).values())
    redis_keys = [*cached, f"{svc.cache.prefix}subject:alice:keys"]
    redis_backup = {k: svc.cache._r.dump(k) for k in redis_keys}

    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    svc.catch_up()
    assert r.request_id and trace(svc.pool, r.request_id, svc.trace_targets()).verdict == "complete"

    # restore every store from the backup, as an operator would after losing them
    with svc.pool.connection() as conn:
        conn.execute(f"TRUNCATE {', '.join(tables)}")
    subprocess.run([psql, "-q", "-v", "ON_ERROR_STOP=1", f"--file={dump}", dsn], check=True, timeout=120)
    svc.index.upsert(points)
    for key, value in redis_backup.items():
        svc.cache._r.restore(key, 0, value, replace=True)
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%555-0147%%'") == 1
    restored = trace(svc.pool, r.request_id, svc.trace_targets())
    assert restored.verdict == "failed"
    assert {s.store for s in restored.stores if s.status == "failed"} == {
        "facts",
        "history",
        "vectors",
        "cache",
        "summaries",
    }

    run = reapply_tombstones(svc.pool, STORES, PurgeTargets(index=svc.index, cache=svc.cache), run_id="rt-test")
    removed = {s.store: s.items_removed for s in run.stores}
    assert removed == {"facts": 2, "vectors": 1, "cache": len(cached), "summaries": 1}  # facts: row + history
    assert all(s.request_ids == [r.request_id] for s in run.stores)
    assert trace(svc.pool, r.request_id, svc.trace_targets()).verdict == "complete"
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%555-0147%%'") == 0
    assert one(svc, "SELECT count(*) FROM summaries_v1") == 0
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE memory_id = %s", keep) == 1
    assert keep in recall_ids(svc, "dark mode") and gone not in recall_ids(svc, "phone 555-0147")
    assert one(svc, "SELECT count(*), sum(items_removed) FROM tombstone_reapplications WHERE run_id = 'rt-test'") == (
        4,
        2 + 1 + len(cached) + 1,
    )
    again = reapply_tombstones(svc.pool, STORES, PurgeTargets(index=svc.index, cache=svc.cache), run_id="rt-again")
    assert all(s.items_removed == 0 for s in again.stores)  # idempotent


def test_reapply_tombstones_refuses_an_unknown_store_naming_the_field(svc: Services) -> None:
    with pytest.raises(ValueError, match=r"^store: unknown ledger"):
        reapply_tombstones(svc.pool, ["ledger"], PurgeTargets(), run_id="rt-x")
    with pytest.raises(ValueError, match=r"^store: vectors needs the vector index"):
        reapply_tombstones(svc.pool, ["vectors"], PurgeTargets(), run_id="rt-x")


# -- a store that is down during the erasure --------------------------------------------------


def test_erasure_while_redis_is_down_is_pending_then_complete_once_it_returns(
    tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    def settings(redis: str) -> Settings:
        return local_settings(tmp_path / "data", fresh_dsn, redis)

    closed = f"redis://127.0.0.1:{closed_port()}/0"

    up = build(settings(redis_url))
    try:
        gone = write(up, "Alice's pager code is 8080")
        up.catch_up()
        assert gone in recall_ids(up, "pager code 8080")  # cached
    finally:
        up.close()

    down = build(settings(closed))
    try:
        r = down.ledger.erase(down.principal(), EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
        assert r.request_id
        for name in ("facts", "vectors", "summaries"):
            down.runner(name).catch_up(down.log)
        with pytest.raises(ProjectionStalledError):
            down.runner("cache", RetryPolicy(initial_s=0.05, max_s=0.1, max_attempts=2)).catch_up(down.log)
        report = trace(down.pool, r.request_id, down.trace_targets())
        cache = next(s for s in report.stores if s.store == "cache")
        assert (cache.status, cache.probe, cache.applied_at) == ("pending", "unreachable", None)
        assert {s.status for s in report.stores if s.store != "cache"} == {"applied"}
        assert report.verdict == "pending"
    finally:
        down.close()

    back = build(settings(redis_url))
    try:
        before = trace(back.pool, r.request_id, back.trace_targets())
        cache = next(s for s in before.stores if s.store == "cache")
        assert (cache.status, cache.probe) == ("pending", "1 copy found")  # the stale entry, not yet dropped
        back.catch_up()
        after = trace(back.pool, r.request_id, back.trace_targets())
        assert after.verdict == "complete", after
        assert next(s for s in after.stores if s.store == "cache").probe == "absent"
    finally:
        back.close()


def test_erasure_while_qdrant_is_down_is_pending_then_complete_once_it_returns(
    tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    """The vectors store is the local Qdrant index before and after the outage, and a
    Qdrant URL nothing answers on during it: the vectors runner retries and stalls on the
    erasure (never skips it), the trace says pending/unreachable, and once the same index
    is back catch-up applies it."""

    def settings(**vectors: Any) -> Settings:
        return local_settings(tmp_path / "data", fresh_dsn, redis_url, **vectors)

    closed = f"http://127.0.0.1:{closed_port()}"

    up = build(settings())
    try:
        gone = write(up, "Alice's locker code is 4711")
        keep = write(up, "Alice prefers tea")
        up.catch_up()
        assert up.index is not None and set(up.index.retrieve([gone, keep])) == {gone, keep}
    finally:
        up.close()

    down = build(settings(qdrant_url=closed))
    try:
        r = down.ledger.erase(down.principal(), EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
        assert r.request_id
        for name in ("facts", "cache", "summaries"):
            down.runner(name).catch_up(down.log)
        vectors = down.runner("vectors", RetryPolicy(initial_s=0.05, max_s=0.1, max_attempts=3))
        with pytest.raises(ProjectionStalledError) as stalled:
            vectors.catch_up(down.log)
        assert (stalled.value.projection, stalled.value.attempts) == ("vectors_v1", 3)
        assert isinstance(stalled.value.__cause__, VectorIndexUnreachableError), stalled.value.__cause__
        assert (stalled.value.partition, stalled.value.offset) == (r.positions[0].partition, r.positions[0].offset)
        assert one(down, "SELECT count(*) FROM memory_dlq") == 0  # retried, never dead-lettered
        report = trace(down.pool, r.request_id, down.trace_targets())
        vec = next(s for s in report.stores if s.store == "vectors")
        assert (vec.status, vec.probe, vec.applied_at, vec.probe_found) == ("pending", "unreachable", None, None)
        assert {s.store: s.status for s in report.stores if s.store != "vectors"} == dict.fromkeys(
            ("facts", "history", "cache", "summaries", "log", "dlq"), "applied"
        )
        assert report.verdict == "pending"
    finally:
        down.close()

    back = build(settings())  # the same local index as before the outage
    try:
        assert back.index is not None and set(back.index.retrieve([gone, keep])) == {gone, keep}  # not applied yet
        before = trace(back.pool, r.request_id, back.trace_targets())
        vec = next(s for s in before.stores if s.store == "vectors")
        assert (vec.status, vec.probe) == ("pending", "1 copy found")
        back.catch_up()
        after = trace(back.pool, r.request_id, back.trace_targets())
        assert after.verdict == "complete", after
        vec = next(s for s in after.stores if s.store == "vectors")
        assert (vec.status, vec.probe, vec.items_removed) == ("applied", "absent", 1)
        assert vec.applied_at is not None
        assert set(back.index.retrieve([gone, keep])) == {keep}
    finally:
        back.close()


def test_an_erasure_whose_event_would_be_over_the_logs_limit_is_refused_and_writes_nothing(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger import service
    from ledger.eventlog import read_all

    p = svc.principal()
    ids = [svc.ledger.write(p, memory_write("bea", f"Bea note {i}")).memory_id for i in range(12)]
    svc.catch_up()
    before = len(list(read_all(svc.log)))
    monkeypatch.setattr(service, "MAX_EVENT_BYTES", 1_000)  # about 12 memories' worth, as 1 MB is 15,000
    with pytest.raises(InvalidCommandError) as refused:
        svc.ledger.erase(p, EraseMemories(subject_id="bea", whole_subject=True, reason="asked"))
    assert refused.value.field == "affected"
    assert "listing 12 memories, over the log's limit of 1,000 bytes per event" in refused.value.rule
    assert len(list(read_all(svc.log))) == before  # nothing appended, nothing staged
    with svc.pool.connection() as conn:
        statuses = {str(r[0]) for r in conn.execute("SELECT status FROM ledger_memories WHERE subject_id = 'bea'")}
        requests = conn.execute("SELECT count(*) FROM erasure_requests WHERE subject_id = 'bea'").fetchone()
    assert statuses == {"active"} and requests == (0,)
    assert recall_ids(svc, "Bea note", "bea")  # still readable: its keys were not destroyed
    # in parts, as the refusal says
    svc.ledger.erase(p, EraseMemories(subject_id="bea", memory_ids=tuple(ids[:6]), reason="asked"))
    svc.ledger.erase(p, EraseMemories(subject_id="bea", memory_ids=tuple(ids[6:]), reason="asked"))
