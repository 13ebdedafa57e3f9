"""``memledger bench``: benchmarks on the real services. Each prints its numbers, then
every figure next to its baseline (measured in the same run), its target and a verdict
(``workers.bench.figures``); ``--json`` prints the numbers and the figures."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from workers.bench.figures import Figure, render_figures, summary
from workers.cli.data import progress_bar
from workers.cli.util import emit, services

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
bench_app = typer.Typer(
    help="Benchmarks: print figures next to the baseline measured in the same run, the target and a verdict.",
    no_args_is_help=True,
)


def report(as_json: bool, out: dict[str, Any], figures: list[Figure], text: Callable[[], str]) -> None:
    """Print ``out`` and ``figures``: JSON (``{"figures": [...], **out}``), or ``text()``
    followed by the figures table and the verdict count."""
    if as_json:
        print(json.dumps({"figures": [f.to_dict() for f in figures], **out}, indent=2, default=str))
        return
    print(text())
    print()
    print(render_figures(figures))
    print(summary(figures))


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
        result = bench_recall(svc, path, progress=progress, limit=limit)
    emit(as_json, result.to_dict(), result.render)


def bench_all(
    locomo: Annotated[Path, typer.Option(help="locomo8.json for the recall benchmark")] = Path(
        "../shared/data/locomo/locomo8.json"
    ),
    events: Annotated[int, typer.Option(help="events for the append benchmark")] = 20_000,
    batch: Annotated[int, typer.Option(help="commands per ledger batch")] = 500,
    rate: Annotated[float, typer.Option(help="steady write rate for the lag benchmark, events/s")] = 200.0,
    seconds: Annotated[float, typer.Option(help="duration of the lag benchmark, s")] = 30.0,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    hashing_too: Annotated[
        bool,
        typer.Option(help="also measure lag and erasure latency with the hashing embedder (when --embedder is not)"),
    ] = True,
    replay_events: Annotated[int, typer.Option(help="events for the replay benchmark (0: skip it)")] = 100_000,
    replay_embedder: Annotated[str, typer.Option(help="embedder of the replay benchmark")] = "hashing",
    as_json: JsonOpt = False,
) -> None:
    """Append throughput, projection lag, erasure propagation latency, LoCoMo throughput and
    recall, and replay speed on Kafka, PostgreSQL and Redis (addresses from MEMLEDGER_TEST_*,
    as `deploy/services.sh env` prints them)."""
    from workers.bench.append import append_figures, bench_append
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.erasure import bench_erasure, erasure_figures
    from workers.bench.lag import bench_lag, lag_figures
    from workers.bench.locomo import bench_locomo, locomo_figures
    from workers.bench.replay import bench_replay, render, replay_figures

    targets = BenchTargets.from_env()
    if not locomo.is_file():
        raise typer.BadParameter(f"locomo: no file at {locomo} (the LoCoMo data, see its README)")
    embedders = list(dict.fromkeys([embedder, *(["hashing"] if hashing_too else [])]))
    out: dict[str, Any] = {"lag": [], "erasure": []}
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            out["append"] = bench_append(env, events, batch, progress)
        figures += append_figures(out["append"])
        for name in embedders:
            with bench_environment(targets, Path(tmp), name) as env:
                out["lag"].append(bench_lag(env, rate, seconds, progress))
            figures += lag_figures(out["lag"][-1])
        for name in embedders:
            with bench_environment(targets, Path(tmp), name) as env:
                out["erasure"].append(bench_erasure(env, rate, seconds, progress))
            figures += erasure_figures(out["erasure"][-1])
        with bench_environment(targets, Path(tmp), embedder) as env:
            out["locomo"] = bench_locomo(env, locomo, progress)
        figures += locomo_figures(out["locomo"])
        if replay_events > 0:
            out["replay"] = bench_replay(targets, Path(tmp), replay_events, batch, replay_embedder, progress)
            figures += replay_figures(out["replay"])
    recall_text = out["locomo"].pop("recall_text")

    def text() -> str:
        lines = [recall_text]
        if "replay" in out:
            lines += ["", render(out["replay"])]
        return "\n".join(lines)

    report(as_json, out, figures, text)


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
    from workers.bench.env import BenchTargets
    from workers.bench.replay import bench_replay, render, replay_figures

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        out = bench_replay(targets, Path(tmp), events, batch, embedder, progress)
    report(as_json, out, replay_figures(out), lambda: render(out))


def bench_erasure_cmd(
    rate: Annotated[float, typer.Option(help="steady write rate during the erasures, events/s")] = 200.0,
    seconds: Annotated[float, typer.Option(help="duration of the write load, s (one erasure per second)")] = 30.0,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    as_json: JsonOpt = False,
) -> None:
    """Erasure propagation latency (ack -> no copy found by any probe, and ack -> trace
    complete in every store) under a steady write load on Kafka with the faust workers
    (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.erasure import bench_erasure, erasure_figures

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            out = bench_erasure(env, rate, seconds, progress)
    report(as_json, out, erasure_figures(out), lambda: json.dumps(out, indent=2))


def bench_lag_cmd(
    rate: Annotated[float, typer.Option(help="steady write rate, events/s")] = 200.0,
    seconds: Annotated[float, typer.Option(help="duration of the write load, s")] = 30.0,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    as_json: JsonOpt = False,
) -> None:
    """Projection lag (ack -> applied, per projection) at a steady write rate on Kafka with
    the faust workers (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.lag import bench_lag, lag_figures

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            out = bench_lag(env, rate, seconds, progress)
    report(as_json, out, lag_figures(out), lambda: json.dumps(out, indent=2))


def bench_embedder_cmd(
    texts: Annotated[int, typer.Option(help="texts to embed with each setting")] = 400,
    as_json: JsonOpt = False,
) -> None:
    """MiniLM with 1 intra-op thread next to one thread per core, alone and beside a
    CPU-bound process (what the other processes on the machine get done meanwhile)."""
    from workers.bench.embedder import bench_embedder, embedder_figures

    with progress_bar(not as_json) as progress:
        out = bench_embedder(texts, progress)
    report(as_json, out, embedder_figures(out), lambda: json.dumps(out, indent=2))


def bench_append_cmd(
    events: Annotated[int, typer.Option(help="events to append")] = 20_000,
    batch: Annotated[int, typer.Option(help="commands per ledger batch")] = 500,
    as_json: JsonOpt = False,
) -> None:
    """Append throughput through the ledger into Kafka next to a raw kafka-python producer
    sending the same bytes (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.append import append_figures, bench_append
    from workers.bench.env import BenchTargets, bench_environment

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), "hashing") as env:
            out = bench_append(env, events, batch, progress)
    report(as_json, out, append_figures(out), lambda: json.dumps(out, indent=2))


def register(app: typer.Typer) -> None:
    bench_app.command("recall-locomo")(bench_recall_locomo)
    bench_app.command("all")(bench_all)
    bench_app.command("append")(bench_append_cmd)
    bench_app.command("lag")(bench_lag_cmd)
    bench_app.command("erasure")(bench_erasure_cmd)
    bench_app.command("replay")(bench_replay_cmd)
    bench_app.command("embedder")(bench_embedder_cmd)
    app.add_typer(bench_app, name="bench")
