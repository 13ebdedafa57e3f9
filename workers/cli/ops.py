"""Operational commands: recall, trace, lag, dlq, worker (replay and the other version
commands: :mod:`workers.cli.versions`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from contracts import utc_now
from projections.trace import render_text, to_json, trace
from projections.trace_html import render_html
from workers.bootstrap import PROJECTION_NAMES
from workers.cli.recall_text import render_recall
from workers.cli.util import emit, parse_time, project_if_embedded, services, warn
from workers.cli.util import settings as cli_settings

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]


def recall(
    subject: str,
    query: str,
    purpose: Annotated[str, typer.Option(help="the task's purpose")],
    k: Annotated[int, typer.Option(help="how many memories")] = 10,
    now: Annotated[str | None, typer.Option(help="ISO 8601 time with zone (default: now, UTC)")] = None,
    scope: Annotated[list[str] | None, typer.Option(help="task scope document:ID or workspace:ID (repeat)")] = None,
    include_unconfirmed: Annotated[bool, typer.Option(help="also return unconfirmed inferences, marked")] = False,
    as_of: Annotated[
        str | None,
        typer.Option(
            help="ISO 8601 time with zone: what was current then (ledger time); never what was erased, revoked or"
            " redacted since"
        ),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="the best memories whose texts fit in this many tokens (the embedder's)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall SUBJECT's memories for QUERY, for a purpose and task scope."""
    moment = parse_time(now, "now") or utc_now()
    past = parse_time(as_of, "as_of")
    with services() as svc:
        project_if_embedded(svc)
        result = svc.recall.recall(
            svc.principal(),
            subject,
            purpose,
            query,
            moment,
            k=k,
            scope_keys=tuple(scope or ()),
            include_unconfirmed=include_unconfirmed,
            as_of=past,
            max_tokens=max_tokens,
        )
    emit(as_json, result.to_dict(), lambda: render_recall(result))


def trace_cmd(
    request_id: str,
    html: Annotated[
        Path | None, typer.Option(help="also write a self-contained HTML report to this file", dir_okay=False)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show where erasure REQUEST_ID was applied, store by store, with live probes."""
    with services() as svc:
        report = trace(svc.pool, request_id, svc.trace_targets())
        svc.principal().require("erase", report.subject_id)  # only who may erase may see the trail
    if html is not None:
        html.write_text(render_html(report), encoding="utf-8")
        warn(f"wrote the HTML report to {html}")
    if as_json:
        print(to_json(report))
    else:
        print(render_text(report))


def lag(as_json: JsonOpt = False) -> None:
    """Records each projection version (building, serving, previous) has not applied yet,
    per partition, and the partitions where it stopped at an erasure it cannot read; for
    vectors also the writes applied in log order whose vectors are still being computed
    (queued); and the records commands wrote that the log has not acknowledged yet (the
    outbox, distributed mode)."""
    from workers.gateway.positions import lag as lag_of

    with services(own_vectors=False, tolerate_topic_problems=True) as svc:  # a wrong topic setting: shown, not fatal
        report = lag_of(svc)
    emit(as_json, report, lambda: _lag_text(report["projections"], report["outbox"]))


def _lag_text(rows: list[dict[str, Any]], waiting: dict[str, Any]) -> str:
    lines = [f"{'projection':<14} {'state':<9} {'lag':>8} {'queued':>8}"]
    for r in rows:
        lines.append(f"{r['projection']:<14} {r['state']:<9} {r['lag']:>8} {r['queued_for_embedding']:>8}")
        lines += [f"  {_stall_line(s)}" for s in r["stalled"]]
    if waiting["records"]:
        lines.append(
            f"outbox: {waiting['records']} record(s) of {waiting['subjects']} subject(s) not in the log yet, the"
            f" oldest for {waiting['oldest_age_s']:.0f} s (since {waiting['oldest_at']}); if it does not shrink, the"
            " log refuses a record: the relay's log says why"
        )
    return "\n".join(lines)


def _stall_line(stall: dict[str, Any]) -> str:
    return (
        f"stalled: {stall['projection']} partition {stall['partition']} offset {stall['offset']}"
        f" since {stall['since']}: {stall['reason']}"
    )


def dlq(limit: int = 20, as_json: JsonOpt = False) -> None:
    """Dead letters: records a projection could not decode, with partition, offset and
    reason; and stalls: partitions where a projection stopped at an erasure it cannot read
    (never dead-lettered, never skipped)."""
    from projections import stalls

    with services(own_vectors=False, projections=(), tolerate_topic_problems=True) as svc:
        letters = svc.dlq.list(limit)
        with svc.pool.connection() as conn:
            stopped = [s.to_dict() for s in stalls.stalled(conn)]
    data = [
        {"projection": d.projection, "partition": d.partition, "offset": d.offset, "key": d.key, "reason": d.reason}
        for d in letters
    ]

    def text() -> str:
        lines = [f"{d['projection']} partition {d['partition']} offset {d['offset']}: {d['reason']}" for d in data]
        lines += [_stall_line(s) for s in stopped]
        return "\n".join(lines) or "no dead letters"

    emit(as_json, {"dead_letters": data, "stalled": stopped}, text)


def worker(
    projection: Annotated[list[str] | None, typer.Option(help="projection(s) to run (repeat; default all)")] = None,
    poll_interval_s: Annotated[
        float, typer.Option(help="embedded mode: seconds between polls", min=0.01, max=60.0)
    ] = 0.5,
    version: Annotated[
        int | None, typer.Option(help="distributed mode: run only this version of one projection", hidden=True)
    ] = None,
) -> None:
    """Run projections, every live version of each (serving and previous): from Kafka with
    faust-streaming (one consumer group per projection version, following the version
    registry), or in the embedded mode by polling the Postgres log."""
    from workers.worker import run_worker

    names = tuple(projection or PROJECTION_NAMES)
    unknown = [n for n in names if n not in PROJECTION_NAMES]
    if unknown:
        raise typer.BadParameter(f"projection: unknown {unknown}; choose from {', '.join(PROJECTION_NAMES)}")
    cfg = cli_settings()
    if version is not None or cfg.mode == "embedded":  # a supervised child, or one process that serves its own
        run_worker(names, poll_interval_s, version)
        return
    from workers.metrics.endpoint import supervisor_metrics

    with supervisor_metrics(cfg):  # one /metrics for the supervisor and every child it starts
        run_worker(names, poll_interval_s, version)


def register(app: typer.Typer) -> None:
    app.command()(recall)
    app.command("trace")(trace_cmd)
    app.command()(lag)
    app.command()(dlq)
    app.command()(worker)
