"""Commands that run scenarios and data: demo, ingest-locomo, bench."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from workers.cliutil import emit, services

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
    data_dir: Annotated[Path, typer.Option(help="fresh directory for the demo's stores (wiped first)")] = Path(
        ".memledger-demo"
    ),
    embedder: Annotated[str, typer.Option(help="minilm (default) or hashing")] = "minilm",
) -> None:
    """Run the bundled scenario on the embedded default: write, supersede, recall, erase, trace, replay."""
    from workers.demo import run_demo

    if not run_demo(data_dir, embedder):
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


def register(app: typer.Typer) -> None:
    app.command()(demo)
    app.command("ingest-locomo")(ingest_locomo)
    bench_app.command("recall-locomo")(bench_recall_locomo)
    app.add_typer(bench_app, name="bench")
