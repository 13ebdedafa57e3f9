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
    settle_heap: Annotated[
        bool, typer.Option(help="freeze what start-up made before the timed recalls (gc.freeze; workers.heap)")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Evidence-turn recall@1/5/10/25 of the ledger's recall next to BM25, categories 1-4."""
    from workers.locomo import bench_recall

    with services() as svc, progress_bar(not as_json) as progress:
        if svc.settings.mode == "embedded":
            svc.catch_up()
        result = bench_recall(svc, path, progress=progress, limit=limit, settle_heap=settle_heap)
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
    scale_out: Annotated[
        int, typer.Option(help="also measure lag with this many workers per projection (below 2: skip it)")
    ] = 2,
    rate_search: Annotated[
        bool, typer.Option(help="also search the highest steady rate at which vectors lag p99 stays within 1 s")
    ] = True,
    replay_events: Annotated[int, typer.Option(help="events for the replay benchmark (0: skip it)")] = 100_000,
    replay_embedder: Annotated[str, typer.Option(help="embedder of the replay benchmark")] = "hashing",
    serve_seconds: Annotated[
        float, typer.Option(help="duration of the serve benchmark per mode, s (0: skip it)")
    ] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Append throughput, projection lag, erasure propagation latency, LoCoMo throughput and
    recall, replay speed and memledger serve under load on Kafka, PostgreSQL and Redis (addresses from MEMLEDGER_TEST_*,
    as `deploy/services.sh env` prints them)."""
    from workers.bench.append import append_figures, bench_append
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.erasure import bench_erasure, erasure_figures
    from workers.bench.lag import bench_lag, bench_lag_rate_search, lag_figures, rate_search_figures
    from workers.bench.locomo import bench_locomo, locomo_figures
    from workers.bench.rejoin import bench_rejoin, rejoin_figures
    from workers.bench.replay import bench_replay, render, replay_figures
    from workers.bench.serve import render as render_serve
    from workers.bench.serve import serve_figures

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
        if scale_out >= 2:
            with bench_environment(targets, Path(tmp), embedder) as env:
                out["lag"].append(bench_lag(env, rate, seconds, progress, workers_per_projection=scale_out))
            figures += lag_figures(out["lag"][-1])
        if rate_search:
            with bench_environment(targets, Path(tmp), embedder) as env:
                out["lag_rate_search"] = bench_lag_rate_search(env, progress)
            figures += rate_search_figures(out["lag_rate_search"])
        with bench_environment(targets, Path(tmp), "hashing") as env:
            out["rejoin"] = bench_rejoin(env, progress)
        figures += rejoin_figures(out["rejoin"])
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
        if serve_seconds > 0:
            plan = load_plan(100.0, serve_seconds, 16, 0.2)
            out["serve"] = run_serve_bench(("embedded", "distributed"), Path(tmp), embedder, plan, progress)
            figures += [f for one in out["serve"] for f in serve_figures(one)]
    recall_text = out["locomo"].pop("recall_text")

    def text() -> str:
        lines = [recall_text]
        if "replay" in out:
            lines += ["", render(out["replay"])]
        if "serve" in out:
            lines += ["", render_serve(out["serve"])]
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
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="workers per projection (vectors: one; several need a Qdrant server, not the local index used here)",
        ),
    ] = 1,
    search_rate: Annotated[
        bool,
        typer.Option(help="instead: search the highest steady rate at which vectors lag p99 stays within 1 s"),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Projection lag (ack -> applied, per projection) at a steady write rate on Kafka with
    the faust workers, and their peak resident memory (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.lag import bench_lag, bench_lag_rate_search, lag_figures, rate_search_figures

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), embedder) as env:
            if search_rate:
                out = bench_lag_rate_search(env, progress)
                figures = rate_search_figures(out)
            else:
                out = bench_lag(env, rate, seconds, progress, workers_per_projection=workers)
                figures = lag_figures(out)
    report(as_json, out, figures, lambda: json.dumps(out, indent=2))


def bench_rejoin_cmd(
    kills: Annotated[int, typer.Option(min=1, help="how many times the worker is killed")] = 3,
    rate: Annotated[float, typer.Option(help="steady write rate meanwhile, events/s")] = 50.0,
    projection: Annotated[str, typer.Option(help="the projection whose worker is killed")] = "facts",
    as_json: JsonOpt = False,
) -> None:
    """A projection's worker killed with SIGKILL under a steady write load and restarted by
    its supervisor: time to applying again and to being back in its consumer group
    (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.env import BenchTargets, bench_environment
    from workers.bench.rejoin import bench_rejoin, rejoin_figures

    targets = BenchTargets.from_env()
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        with bench_environment(targets, Path(tmp), "hashing") as env:
            out = bench_rejoin(env, progress, kills=kills, rate=rate, projection=projection)
    report(as_json, out, rejoin_figures(out), lambda: json.dumps(out, indent=2))


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


def bench_serve_cmd(
    rate: Annotated[float, typer.Option(help="offered load, requests/s")] = 100.0,
    seconds: Annotated[float, typer.Option(help="duration of the load, s")] = 30.0,
    clients: Annotated[int, typer.Option(help="concurrent HTTP clients", min=1, max=256)] = 16,
    write_share: Annotated[float, typer.Option(help="share of the requests that are writes", min=0, max=1)] = 0.2,
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
    mode: Annotated[str, typer.Option(help="embedded, distributed or both")] = "both",
    as_json: JsonOpt = False,
) -> None:
    """memledger serve under a steady load of recalls and writes from concurrent HTTP
    clients, next to the same operations in-process, in the embedded default and in the
    distributed mode (Kafka, PostgreSQL, Redis at MEMLEDGER_TEST_*, with memledger worker)."""
    from workers.bench.serve import render, serve_figures

    if mode not in ("embedded", "distributed", "both"):
        raise typer.BadParameter(f"mode: {mode!r} must be embedded, distributed or both")
    plan = load_plan(rate, seconds, clients, write_share)
    modes = ("embedded", "distributed") if mode == "both" else (mode,)
    with tempfile.TemporaryDirectory(prefix="memledger-bench-") as tmp, progress_bar(not as_json) as progress:
        outs = run_serve_bench(modes, Path(tmp), embedder, plan, progress)
    figures = [f for out in outs for f in serve_figures(out)]
    report(as_json, {"serve": outs}, figures, lambda: render(outs))


def load_plan(rate: float, seconds: float, clients: int, write_share: float) -> Any:
    from workers.bench.serve_load import LoadPlan

    return LoadPlan(rate=rate, seconds=seconds, clients=clients, write_share=write_share)


def run_serve_bench(modes: tuple[str, ...], tmp: Path, embedder: str, plan: Any, progress: Any) -> list[dict[str, Any]]:
    """``bench_embedded`` and/or ``bench_distributed`` (addresses from MEMLEDGER_TEST_*)."""
    from workers.bench.env import BenchTargets
    from workers.bench.serve import bench_distributed, bench_embedded

    outs = []
    if "embedded" in modes:
        outs.append(bench_embedded(tmp / "serve-embedded", embedder, plan, progress))
    if "distributed" in modes:
        outs.append(bench_distributed(BenchTargets.from_env(), tmp, embedder, plan, progress))
    return outs


def register(app: typer.Typer) -> None:
    bench_app.command("recall-locomo")(bench_recall_locomo)
    bench_app.command("all")(bench_all)
    bench_app.command("append")(bench_append_cmd)
    bench_app.command("lag")(bench_lag_cmd)
    bench_app.command("erasure")(bench_erasure_cmd)
    bench_app.command("rejoin")(bench_rejoin_cmd)
    bench_app.command("replay")(bench_replay_cmd)
    bench_app.command("serve")(bench_serve_cmd)
    bench_app.command("embedder")(bench_embedder_cmd)
    app.add_typer(bench_app, name="bench")
