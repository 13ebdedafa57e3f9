"""Commands that run scenarios and read data: demo, ingest-locomo, bench, conflicts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from projections.conflicts import Conflict, list_conflicts
from projections.facts import STABLE
from projections.wording import one_line
from workers.cli.util import STATE, emit, project_if_embedded, services

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
bench_app = typer.Typer(
    help="Benchmarks: print numbers next to the baseline measured in the same run.", no_args_is_help=True
)


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """A ``progress(stage, done, total)`` callback drawing rich bars on stderr."""
    if not enabled:
        yield lambda stage, done, total: None
        return
    bars = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    tasks: dict[str, TaskID] = {}
    with bars:

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.update(tasks[stage], completed=done, total=total)

        yield update


def demo(
    data_dir: Annotated[
        Path | None,
        typer.Option(help="directory for the demo's stores (default .memledger-demo; wiped first if the demo made it)"),
    ] = None,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
) -> None:
    """Run the bundled scenario on the embedded default: write, supersede, recall, erase, trace, replay."""
    from workers.demo import DEFAULT_DEMO_DIR, check_demo_dir, run_demo

    where = data_dir or STATE.data_dir or DEFAULT_DEMO_DIR
    try:
        if where != DEFAULT_DEMO_DIR:  # the default directory is the demo's own by its name
            check_demo_dir(where)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not run_demo(where, embedder):
        raise typer.Exit(1)


def ingest_locomo(
    path: Annotated[Path, typer.Argument(help="locomo8.json (LoCoMo, CC BY-NC 4.0)")],
    limit: Annotated[int | None, typer.Option(help="only the first N conversations")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Turn LoCoMo conversations into the events an agent service would produce."""
    from workers.locomo import ingest

    with services() as svc, progress_bar(not as_json) as progress:
        report = ingest(svc, path, progress=progress, limit=limit)
    emit(as_json, report.to_dict(), report.render)


def bench_recall_locomo(
    path: Annotated[Path, typer.Argument(help="locomo8.json, already ingested with ingest-locomo")],
    limit: Annotated[int | None, typer.Option(help="only the first N conversations")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Evidence-turn recall@1/5/10/25 of the ledger's recall next to BM25, categories 1-4."""
    from workers.locomo import bench_recall

    with services() as svc, progress_bar(not as_json) as progress:
        if svc.settings.mode == "embedded":
            svc.catch_up()
        report = bench_recall(svc, path, progress=progress, limit=limit)
    emit(as_json, report.to_dict(), report.render)


def bench_all(
    locomo: Annotated[Path, typer.Option(help="locomo8.json for the recall benchmark")] = Path(
        "../shared/data/locomo/locomo8.json"
    ),
    events: Annotated[int, typer.Option(help="events for the append benchmark")] = 20_000,
    batch: Annotated[int, typer.Option(help="commands per ledger batch")] = 500,
    rate: Annotated[float, typer.Option(help="steady write rate for the lag benchmark, events/s")] = 200.0,
    seconds: Annotated[float, typer.Option(help="duration of the lag benchmark, s")] = 30.0,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    erasure_hashing: Annotated[
        bool, typer.Option(help="also measure erasure latency with the hashing embedder (when --embedder is not)")
    ] = True,
    replay_events: Annotated[int, typer.Option(help="events for the replay benchmark (0: skip it)")] = 100_000,
    replay_embedder: Annotated[str, typer.Option(help="embedder of the replay benchmark")] = "hashing",
    as_json: JsonOpt = False,
) -> None:
    """Append throughput, projection lag, erasure propagation latency, LoCoMo recall and
    replay speed on Kafka, PostgreSQL and Redis (addresses from MEMLEDGER_TEST_*, as
    `deploy/services.sh env` prints them)."""
    import json
    import tempfile

    from workers.bench import (
        BenchTargets,
        bench_append,
        bench_environment,
        bench_erasure,
        bench_lag,
        bench_locomo,
    )
    from workers.bench_replay import bench_replay
    from workers.bench_replay import render as render_replay

    targets = BenchTargets.from_env()
    if not locomo.is_file():
        raise typer.BadParameter(f"locomo: no file at {locomo} (the LoCoMo data, see its README)")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            out["append"] = bench_append(env, events, batch, progress)
        with bench_environment(targets, Path(tmp), embedder) as env:
            out["lag"] = bench_lag(env, rate, seconds, progress)
        out["erasure"] = []
        for erasure_embedder in dict.fromkeys([embedder, *(["hashing"] if erasure_hashing else [])]):
            with bench_environment(targets, Path(tmp), erasure_embedder) as env:
                out["erasure"].append(bench_erasure(env, rate, seconds, progress))
        with bench_environment(targets, Path(tmp), embedder) as env:
            out["locomo"] = bench_locomo(env, locomo, progress)
        if replay_events > 0:
            out["replay"] = bench_replay(targets, Path(tmp), replay_events, batch, replay_embedder, progress)
    if as_json:
        locomo_out = dict(out["locomo"])
        locomo_out.pop("recall_text", None)
        print(json.dumps({**out, "locomo": locomo_out}, indent=2))
        return
    a, lag, lo = out["append"], out["lag"], out["locomo"]
    print(f"append ({a['events']} events, {a['bytes']} bytes, batches of {a['batch']}):")
    print(f"  ledger -> Kafka        {a['ledger_events_per_s']:>10} events/s  {a['ledger_mb_per_s']} MB/s")
    print(f"  raw kafka-python       {a['raw_events_per_s']:>10} events/s  {a['raw_mb_per_s']} MB/s (baseline)")
    print(
        f"projection lag, ack -> visible in facts and vectors, at {lag['achieved_rate']} events/s "
        f"(target {lag['target_rate']}): p50 {lag['lag_p50_ms']} ms, p99 {lag['lag_p99_ms']} ms "
        f"over {lag['events']} events"
    )
    for er in out["erasure"]:
        print(
            f"erasure propagation, ack -> trace complete (receipts and probes) in every store,"
            f" {er['embedder']} embedder, under "
            f"{er['achieved_rate']} writes/s (target {er['target_rate']}): p50 {er['erasure_p50_ms']} ms, "
            f"p99 {er['erasure_p99_ms']} ms over {er['erasures']} erasures "
            f"({er['not_complete_within_120s']} not complete within 120 s; probe period {er['probe_period_ms']} ms)"
        )
        print(
            f"  ack -> no copy found by any probe (the erasure lane, ahead of the log):"
            f" p50 {er['erasure_absent_p50_ms']} ms, p99 {er['erasure_absent_p99_ms']} ms"
        )
        print(
            f"  the write load in the same run, ack -> facts and vectors: p50 {er['write_lag_p50_ms']} ms, "
            f"p99 {er['write_lag_p99_ms']} ms over {er['write_events']} events"
        )
    print(f"LoCoMo through Kafka: ingest + projection {lo['ingest_and_projection_s']} s")
    print(lo["recall_text"])
    if "replay" in out:
        print(render_replay(out["replay"]))


def bench_replay_cmd(
    events: Annotated[int, typer.Option(help="events to produce and replay (at least)")] = 100_000,
    batch: Annotated[int, typer.Option(help="commands per ledger batch")] = 500,
    embedder: Annotated[str, typer.Option(help="embedder of the vectors projection: hashing (default) or minilm")] = (
        "hashing"
    ),
    as_json: JsonOpt = False,
) -> None:
    """Replay speed of facts alone and of all four projections from a Kafka topic, next to
    a raw kafka-python consumer reading the same topic (addresses from MEMLEDGER_TEST_*)."""
    import tempfile

    from workers.bench import BenchTargets
    from workers.bench_replay import bench_replay, render

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        out = bench_replay(targets, Path(tmp), events, batch, embedder, progress)
    emit(as_json, out, lambda: render(out))


def bench_erasure_cmd(
    rate: Annotated[float, typer.Option(help="steady write rate during the erasures, events/s")] = 200.0,
    seconds: Annotated[float, typer.Option(help="duration of the write load, s (one erasure per second)")] = 30.0,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    as_json: JsonOpt = False,
) -> None:
    """Erasure propagation latency (ack -> no copy found by any probe, and ack -> trace
    complete in every store) under a steady write load on Kafka with the faust workers
    (addresses from MEMLEDGER_TEST_*)."""
    import json
    import tempfile

    from workers.bench import BenchTargets, bench_environment, bench_erasure

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            out = bench_erasure(env, rate, seconds, progress)
    emit(as_json, out, lambda: json.dumps(out, indent=2))


def render_conflicts(conflicts: list[Conflict], subject: str) -> str:
    """A rich table per conflict (members with status, source and text), as plain text."""
    if not conflicts:
        return f"no conflicts for {subject}"
    console = Console(width=160, highlight=False)
    with console.capture() as captured:
        for c in conflicts:
            state = "open" if c.open else f"merged into {c.merged_into}" if c.merged_into else "resolved"
            title = (
                f"conflict {c.conflict_id} ({state}): key {c.key or '(unreadable)'}, purpose {c.purpose},"
                f" scope {c.scope['type']}:{c.scope['id'] or '(unreadable)'},"
                f" detected {c.detected_at:%Y-%m-%d %H:%M:%S}Z"
            )
            table = Table(title=Text(one_line(title)), title_justify="left")  # Text: values are not rich markup
            for column in ("memory", "status", "veracity", "written at"):
                table.add_column(column, no_wrap=True)
            table.add_column("source", overflow="fold")
            table.add_column("content", overflow="fold", ratio=1)
            for m in c.members:
                cells = (
                    m.memory_id,
                    m.status,
                    m.veracity or "-",
                    f"{m.written_at:%Y-%m-%d %H:%M:%S}Z" if m.written_at else "-",
                    ", ".join(f"{k} {v}" for k, v in m.source.items()) or "-",
                    m.content if m.content is not None else "(not readable)",
                )
                table.add_row(*(Text(one_line(cell)) for cell in cells))
            console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().rstrip().splitlines())


def conflicts(
    subject: str,
    include_resolved: Annotated[bool, typer.Option("--all", help="also list resolved conflicts")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List SUBJECT's conflicts: memories that claim different values for one key.
    A conflict is open while two or more of its memories are live; needs a read grant."""
    with services(own_vectors=False, projections=("facts",)) as svc:
        svc.principal().require("read", subject)
        project_if_embedded(svc)
        found = list_conflicts(svc.pool, STABLE, subject, include_resolved=include_resolved)
    emit(as_json, [c.to_dict() for c in found], lambda: render_conflicts(found, subject))


def register(app: typer.Typer) -> None:
    app.command()(demo)
    app.command()(conflicts)
    app.command("ingest-locomo")(ingest_locomo)
    bench_app.command("recall-locomo")(bench_recall_locomo)
    bench_app.command("all")(bench_all)
    bench_app.command("erasure")(bench_erasure_cmd)
    bench_app.command("replay")(bench_replay_cmd)
    app.add_typer(bench_app, name="bench")
