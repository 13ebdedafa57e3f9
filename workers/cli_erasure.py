"""Compliance commands around erasure: erasure-report, reapply-tombstones."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Annotated

import typer

from ledger.service import new_id
from projections.erasure_report import erasure_report
from projections.tombstones import STORES, reapply_tombstones
from workers.cliutil import emit, parse_time, services

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
    local index has one owner). Records the run in tombstone_reapplications."""
    stores = STORES if store == "all" else (store,)
    if any(s not in STORES for s in stores):
        raise typer.BadParameter(f"store: must be one of {', '.join(STORES)} or all")
    own_vectors = "vectors" in stores or None  # the index is purged here, not through its owner
    with services(own_vectors=own_vectors, projections=()) as svc:
        svc.principal().require("erase", "*")  # purging spans every subject
        targets = svc.purge_targets()
        result = reapply_tombstones(svc.pool, stores, targets, run_id="rt-" + new_id())
    emit(as_json, result.to_dict(), result.render)


def register(app: typer.Typer) -> None:
    app.command("erasure-report")(erasure_report_cmd)
    app.command("reapply-tombstones")(reapply_tombstones_cmd)
