"""``memledger eval``: evaluations that print measures and exit 1 when a check fails."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from contracts import utc_now
from projections.ranking.config import RANKER_NAMES, RankingConfig
from workers.bootstrap import PROJECTION_NAMES, Services
from workers.cli import util as cliutil
from workers.cli.util import emit, services, settings

eval_app = typer.Typer(
    help="Evaluations: the scenario suite of the memory lifecycle, and recall's ranking on LoCoMo.",
    no_args_is_help=True,
)

DEFAULT_LOCOMO = Path("../shared/data/locomo/locomo8.json")
"""Where the LoCoMo file lies relative to a clone next to the ``shared/`` directory."""


def _wait_for_workers(svc: Services, timeout_s: float) -> None:
    """Block until the serving version of every projection is at the end of the log.

    Raises:
        TimeoutError: still behind after ``timeout_s`` seconds.
    """
    import psycopg

    from projections import base

    deadline = time.monotonic() + timeout_s
    while True:
        ends = svc.log.end_offsets()
        behind: dict[str, int] = {}
        for name, info in svc.stores.serving().items():
            try:
                with svc.pool.connection() as conn:
                    done = base.load_positions(conn, info.id)
            except psycopg.errors.UndefinedTable:  # no worker has started yet
                done = {}
            behind[name] = sum(max(0, end - (done.get(p, -1) + 1)) for p, end in ends.items())
        if not any(behind.values()):
            return
        if time.monotonic() > deadline:
            lagging = ", ".join(f"{n} {lag}" for n, lag in behind.items() if lag)
            raise TimeoutError(f"workers: still behind after {timeout_s:.0f}s ({lagging}); is `memledger worker` up?")
        time.sleep(0.2)


@eval_app.command("scenarios")
def scenarios(
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", "-s", help="run only this scenario (repeat)")
    ] = None,
    workers: Annotated[
        bool,
        typer.Option(
            "--workers",
            help="distributed mode: let running `memledger worker` processes project, and wait for them before"
            " each check, instead of projecting in this process",
        ),
    ] = False,
    timeout_s: Annotated[float, typer.Option(help="with --workers: longest wait for the workers, s")] = 120.0,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="embedded mode: run in the configured data directory (its ledger keeps the scn-* subjects)"
            " instead of a scratch directory deleted afterwards",
        ),
    ] = False,
    details: Annotated[bool, typer.Option(help="a table of checks per scenario before the summary")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """Run the memory-lifecycle scenario suite on fresh subjects, in the configured mode.

    Prints per scenario and in total: relevance of recalled items, stale items returned
    (must be 0), undetected conflicts (must be 0), context cost (tokens of recalled text
    per query). Exit status 1 when a scenario fails. In the embedded mode the suite runs
    in a scratch data directory unless ``--in-place``; in the distributed mode it writes
    its ``scn-*`` subjects into the configured stores.
    """
    if settings().mode == "embedded" and not in_place:
        scratch = tempfile.mkdtemp(prefix="memledger-eval-")
        # removed at exit, after the embedded PostgreSQL's own exit handler (registered
        # later, so run earlier) has stopped the server that lives in it
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        cliutil.STATE.data_dir = Path(scratch)
    _run_scenarios(scenario, workers, timeout_s, details, as_json)


def _run_scenarios(scenario: list[str] | None, workers: bool, timeout_s: float, details: bool, as_json: bool) -> None:
    from workers.scenarios import ScenarioReport, run_suite, select

    chosen = select(scenario)
    cfg = settings()
    if workers and cfg.mode == "embedded":
        raise typer.BadParameter("workers: only in the distributed mode (MEMLEDGER_KAFKA_BOOTSTRAP)")
    console = Console(stderr=True, highlight=False)
    # in-process: this process runs every projection (it opens the local vector index itself,
    # so no vectors worker may own it at the same time)
    with services(own_vectors=not workers, projections=() if workers else PROJECTION_NAMES) as svc:
        sync = (lambda: _wait_for_workers(svc, timeout_s)) if workers else None

        def progress(report: ScenarioReport) -> None:
            if not as_json:
                console.print(f"  {report.name}: {'ok' if report.passed else 'FAIL'} ({report.seconds:.1f} s)")

        suite = run_suite(svc, chosen, sync=sync, progress=progress)
    if as_json:
        emit(True, suite.to_dict(), "")
    else:
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=max(out.width, 132))  # files and pipes: not 80 columns
        suite.render(out, details=details)
    if not suite.passed:
        raise typer.Exit(1)


def _ranking_of(cfg_ranking: RankingConfig, rankers: str | None) -> RankingConfig:
    """The configured ranking, or only the comma-separated ``rankers`` of it."""
    if rankers is None:
        return cfg_ranking
    names = [n.strip() for n in rankers.split(",") if n.strip()]
    unknown = [n for n in names if n not in RANKER_NAMES]
    if unknown or not names:
        raise typer.BadParameter(f"rankers: give a comma-separated list of {', '.join(RANKER_NAMES)}; got {rankers!r}")
    return cfg_ranking.only(*names)


@eval_app.command("recall")
def recall_eval(
    path: Annotated[Path, typer.Argument(help="the LoCoMo file (CC BY-NC 4.0)")] = DEFAULT_LOCOMO,
    limit: Annotated[int | None, typer.Option(help="only the first N conversations", min=1)] = None,
    rankers: Annotated[
        str | None,
        typer.Option(
            help="comma-separated rankers to fuse (fts, vector, lineage, sessions, neighbours); default:"
            " those of MEMLEDGER_RECALL_WEIGHTS"
        ),
    ] = None,
    ablations: Annotated[
        bool, typer.Option(help="also the fusion without each ranker and each shaping step, and the fts scorings")
    ] = True,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="embedded mode: evaluate the configured data directory (after ingest-locomo) instead of ingesting"
            " into a scratch directory deleted afterwards",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """Measure recall on LoCoMo: R@1/5/10/25, MRR, nDCG@10 (ir-measures) per question category,
    for the fusion, each ranker alone and the ablations, next to BM25 and dense baselines
    computed in the same run, with tokens per query at k=10 and latency p50/p99 (cache bypassed).

    In the embedded mode the conversations are ingested into a scratch directory first
    (unless --in-place); otherwise they must have been ingested (ingest-locomo)."""
    from workers.cli.data import progress_bar
    from workers.locomo import ingest
    from workers.recall_eval import evaluate, load_eval_set, stores_of

    cfg = settings()
    config = _ranking_of(cfg.ranking(), rankers)
    evalset = load_eval_set(path, limit)
    scratch = cfg.mode == "embedded" and not in_place
    if scratch:
        where = tempfile.mkdtemp(prefix="memledger-eval-")
        atexit.register(shutil.rmtree, where, ignore_errors=True)  # after the embedded servers stop
        cliutil.STATE.data_dir = Path(where)
    with services() as svc, progress_bar(not as_json) as progress:
        if scratch:
            ingest(svc, path, progress=progress, limit=limit)
        elif svc.settings.mode == "embedded":
            svc.catch_up()
        report = evaluate(stores_of(svc, evalset), evalset, config, utc_now(), ablations=ablations, progress=progress)
    if as_json:
        emit(True, report.to_dict(), "")
    else:
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=max(out.width, 160))
        report.render(out)


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
