"""Commands that run scenarios and read data: demo, ingest-locomo, conflicts; the
progress bar that long commands share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

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


def render_conflicts(conflicts: list[Conflict], subject: str) -> str:
    """A rich table per conflict (members with status, source and text), as plain text."""
    if not conflicts:
        return f"no conflicts for {one_line(subject)}"
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
