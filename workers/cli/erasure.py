"""Compliance commands around erasure: erasure-report, reapply-tombstones, rotate-master-key,
compact."""

from __future__ import annotations

import os
from contextlib import ExitStack
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Annotated

import typer

from contracts import utc_now
from ledger.crypto import parse_master_key
from ledger.erasure import restore_requests, restore_tombstones
from ledger.errors import KeyStoreError
from ledger.service import new_id
from projections.compaction import compact
from projections.erasure_report import erasure_report
from projections.tombstones import STORES, reapply_tombstones
from projections.vector_index import VectorIndexError
from projections.wording import counted
from workers.cli.util import emit, parse_time, project_if_embedded, services, warn
from workers.compaction import compact_targets

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]


def parse_date_or_time(value: str, field: str) -> datetime:
    """``YYYY-MM-DD`` (midnight UTC) or an ISO 8601 time with a zone.

    Raises:
        typer.BadParameter: naming ``field``, for anything else or a time without a zone.
    """
    try:
        return datetime.combine(date.fromisoformat(value), time(0, tzinfo=UTC))
    except ValueError:
        pass
    moment = parse_time(value, field)
    assert moment is not None
    return moment


def erasure_report_cmd(
    since: Annotated[str, typer.Option(help="from this date (YYYY-MM-DD, UTC) or ISO 8601 time with zone")],
    until: Annotated[str | None, typer.Option(help="up to, not including, this date or time (default: now)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every erasure request in a period, with subject, kind, requester, memories and the
    verdict trace gives it. Requests of subjects the principal may not erase are left out
    (and counted)."""
    start = parse_date_or_time(since, "since")
    end = None if until is None else parse_date_or_time(until, "until")
    with services(projections=()) as svc:  # probes vectors like trace: own index when embedded
        principal = svc.principal()
        report = erasure_report(
            svc.pool, svc.trace_targets(), start, end, include=lambda subject: principal.may("erase", subject)
        )
    emit(as_json, report.to_dict(), report.render)


def reapply_tombstones_cmd(
    store: Annotated[str, typer.Argument(help="facts | vectors | cache | summaries | all")],
    as_json: JsonOpt = False,
) -> None:
    """Purge from STORE every memory in the tombstones table, e.g. after restoring the store
    from a backup taken before an erasure. For vectors, stop the vectors worker first (the
    local index has one owner). Records the run in tombstone_reapplications.

    First the ledger's own tables are brought back in line: in the distributed mode the
    tombstones table is checked against the compacted tombstone topic (a Postgres restored
    from an old backup lacks rows) and missing rows restored; then every tombstoned
    memory's data keys that a restore brought back are destroyed again and its head keeps
    no personal field. Then the stores are purged."""
    stores = STORES if store == "all" else (store,)
    if any(s not in STORES for s in stores):
        raise typer.BadParameter(f"store: must be one of {', '.join(STORES)} or all")
    own_vectors = "vectors" in stores or None  # the index is purged here, not through its owner
    with services(own_vectors=own_vectors, projections=()) as svc:
        svc.principal().require("erase", "*")  # purging spans every subject
        from_topic: dict[str, object] | None = None
        known = svc.tombstone_set.all() if svc.tombstone_set is not None else {}
        with svc.pool.connection() as conn, conn.transaction():  # keys and heads first, then the stores
            rows, keys = restore_tombstones(conn, svc.keyring, known, utc_now())
            requests = restore_requests(conn, svc.log)
        if svc.tombstone_set is not None:
            from_topic = {"topic": svc.tombstone_set.topic, "tombstones": len(known), "rows_restored": rows}
            from_topic["keys_destroyed"] = keys
        targets = svc.purge_targets()
        result = reapply_tombstones(svc.pool, stores, targets, run_id="rt-" + new_id())
    out = result.to_dict() | {"keys_destroyed_again": keys, "requests_recorded_again": requests}
    out |= {"restored_from_topic": from_topic} if from_topic is not None else {}

    def render() -> str:
        again = f"{counted(requests, 'erasure request')} recorded again from the log\n" if requests else ""
        if from_topic is None:
            destroyed = f"{counted(keys, 'data key')} of tombstoned memories destroyed again\n" if keys else ""
            return destroyed + again + result.render()
        head = (
            f"tombstones table checked against {from_topic['topic']} ({counted(len(known), 'tombstone')}):"
            f" {counted(rows, 'row')} restored, {counted(keys, 'data key')} destroyed again"
        )
        return head + "\n" + again + result.render()

    emit(as_json, out, render)


NEW_KEY_ENV = "MEMLEDGER_NEW_MASTER_KEY"


def rotate_master_key_cmd(
    new_key_file: Annotated[
        Path | None,
        typer.Option(help=f"file holding the new master key (URL-safe base64 of 32 bytes); or set {NEW_KEY_ENV}"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-wrap every live data key under a new master key, in one transaction; destroyed
    keys stay destroyed. Then give every process the new key (MEMLEDGER_MASTER_KEY) and
    restart it: a process still on the old key cannot open data keys and retries, it
    skips nothing. When the current key is the data directory's master.key file, the
    file is replaced with the new key after the commit. Running it again with the same
    new key is harmless and re-wraps keys a process on the old key created meanwhile."""
    if new_key_file is not None:
        text = new_key_file.read_text(encoding="ascii")
    elif os.environ.get(NEW_KEY_ENV):
        text = os.environ[NEW_KEY_ENV]
    else:
        raise typer.BadParameter(f"new_key_file: give --new-key-file or set {NEW_KEY_ENV}")
    try:
        new_key = parse_master_key(text)
    except KeyStoreError as exc:
        raise KeyStoreError(f"new_{exc}") from None
    with services(own_vectors=False, projections=()) as svc:
        svc.principal().require("erase", "*")  # the keys of every subject
        with svc.pool.connection() as conn, conn.transaction():
            report = svc.keyring.rotate(conn, new_key)
        key_file = None
        if svc.settings.master_key is None:  # the key lives in <data dir>/master.key: replace it
            key_file = svc.settings.data_dir / "master.key"
            tmp = key_file.with_name("master.key.new")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text.strip())
            os.replace(tmp, key_file)
    out = {
        "old_master_key_id": report.old_master_key_id,
        "new_master_key_id": report.new_master_key_id,
        "rewrapped": report.rewrapped,
        "already_rotated": report.already_rotated,
        "destroyed_untouched": report.destroyed,
        "key_file_replaced": None if key_file is None else str(key_file),
    }

    def text_out() -> str:
        lines = [
            f"master key {report.old_master_key_id} -> {report.new_master_key_id}: {report.rewrapped} data keys"
            f" re-wrapped, {report.already_rotated} already rotated, {report.destroyed} destroyed keys left destroyed",
        ]
        if key_file is not None:
            lines.append(f"replaced {key_file} with the new key")
        else:
            lines.append("now set MEMLEDGER_MASTER_KEY to the new key in every process and restart them")
        return "\n".join(lines)

    emit(as_json, out, text_out)


def compact_cmd(
    lock_timeout_s: Annotated[
        float,
        typer.Option(
            "--lock-timeout-s",
            min=0.1,
            max=600.0,
            help="longest wait for each table's lock, and for older snapshots to end, seconds",
        ),
    ] = 5.0,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite what erasures, redactions and revocations left on disk: the ledger's and
    every projection version's tables and indexes (VACUUM FULL, each waiting at most
    --lock-timeout-s for its lock, after waiting as long for the transactions older than
    the compaction to end: their snapshots keep removed rows in a rewritten file), their
    statistics, the WAL (a switch and a checkpoint), the vector collections and the Redis
    dump. Progress on stderr; the run is recorded, and `trace` shows its time in the
    `disk` row. Stop the vectors worker first when it owns a local index (distributed mode
    without a Qdrant server), or its collection is skipped."""
    unreachable: str | None = None
    with ExitStack() as stack:
        try:
            svc = stack.enter_context(services(own_vectors=True))
        except VectorIndexError as exc:  # the vectors worker holds the local index
            unreachable = str(exc)
            svc = stack.enter_context(services(own_vectors=False))
        svc.principal().require("erase", "*")  # it rewrites every subject's data
        project_if_embedded(svc)  # the erasures' own events first: compaction rewrites what they left
        targets = compact_targets(svc, lock_timeout_s, unreachable)

        def progress(step: str, done: int, total: int) -> None:
            warn(f"compact: {step} ({done}/{total})")

        report = compact(svc.pool, targets, "cp-" + new_id(), progress)
    emit(as_json, report.to_dict(), report.render)
    if not report.complete:
        warn("compaction is partial: what a step left is listed above; `trace` keeps saying `residue until compaction`")


def register(app: typer.Typer) -> None:
    app.command("compact")(compact_cmd)
    app.command("erasure-report")(erasure_report_cmd)
    app.command("reapply-tombstones")(reapply_tombstones_cmd)
    app.command("rotate-master-key")(rotate_master_key_cmd)
