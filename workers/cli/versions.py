"""Version commands: replay (shadow rebuild + swap), rollback, retire, versions.

``memledger replay PROJECTION`` is a rebuild to the next version: the serving version
keeps serving (and being applied by the workers) until the new one has caught up with
the live end of the log; then the stable names switch to it atomically. The old version
is kept, and applied, until ``memledger retire PROJECTION --version N``;
``memledger rollback PROJECTION`` swaps back to it.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from projections import versions
from projections.embedding import build_embedder
from projections.errors import ProjectionStalledError
from workers.cli.util import emit, services
from workers.versioning import RebuildProgress, rebuild_many, retire, rollback

MAX_VERSION = 1_000_000
"""The highest version ``--to-version`` takes (the registry keeps PostgreSQL integers)."""

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
ProjectionArg = Annotated[str, typer.Argument(help="facts | vectors | cache | summaries")]


def _name(projection: str) -> str:
    """``facts`` from ``facts`` or ``facts_v3``; refuses other names."""
    name = re.sub(r"_v[0-9]+$", "", projection)
    if name not in versions.NAMES:
        raise typer.BadParameter(f"projection: must be one of {', '.join(versions.NAMES)}")
    return name


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _bar(enabled: bool) -> Progress:
    """Progress on stderr, so that ``--json`` output on stdout stays clean."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>7} ev/s  lag {task.fields[lag]:>7}  left {task.fields[eta]}"),
        console=Console(stderr=True),
        disable=not enabled,
    )


def _check_embedder(name: str, embedder: str | None) -> None:
    """Refuse, before any store is opened, an ``--embedder`` that names no embedder or
    is given for a projection other than vectors (building one loads no model yet)."""
    if embedder is None:
        return
    if name != "vectors":
        raise typer.BadParameter(f"--embedder: only the vectors projection has an embedder, not {name}")
    try:
        build_embedder(embedder, setting="--embedder")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _names(projections: list[str]) -> list[str]:
    """The projections named (``all``: every one), each once, in the order given."""
    if projections == ["all"]:
        return list(versions.NAMES)
    if "all" in projections:
        raise typer.BadParameter("projection: 'all' stands alone")
    return list(dict.fromkeys(_name(p) for p in projections))


def replay(
    projections: Annotated[
        list[str], typer.Argument(help="facts | vectors | cache | summaries (several: one pass) | all")
    ],
    to_version: Annotated[
        int | None,
        typer.Option(
            help="the version to build (default: one above every existing version; one projection only)",
            min=1,
            max=MAX_VERSION,
        ),
    ] = None,
    embedder: Annotated[
        str | None, typer.Option(help="vectors only: embedder of the new collection (default: the serving one's)")
    ] = None,
    wait_s: Annotated[float, typer.Option(help="longest wait for a worker at the swap, seconds")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild each PROJECTION from offset 0 into a new version while the serving one keeps
    serving, follow the log to its live end, then swap the stable names to it atomically.
    Several projections (or all) are rebuilt in one pass over the log: each event is read,
    decoded and opened once for all of them. Progress (position, events/s, lag, time left)
    goes to stderr. The replaced version is kept until `memledger retire`; `memledger
    rollback` swaps back. --json prints one object for one projection, a list for several."""
    names = _names(projections)
    if to_version is not None and len(names) > 1:
        raise typer.BadParameter("--to-version: give it with one projection only (each has its own versions)")
    if embedder is not None and "vectors" not in names:
        _check_embedder(names[0], embedder)
    _check_embedder("vectors", embedder)
    label = "+".join(names)
    with services(projections=()) as svc:
        bar = _bar(not as_json)
        task: TaskID | None = None

        def show(p: RebuildProgress) -> None:
            # the bar starts with the first progress: a refused replay (e.g. a
            # --to-version that exists already) draws none before its error
            nonlocal task
            if task is None:
                bar.start()
                task = bar.add_task(f"replay {label}", total=None, rate="-", lag="-", eta=_eta(None))
            bar.update(
                task,
                description=f"replay {p.projection}",
                completed=p.position,
                total=p.end,
                rate=f"{p.rate:.0f}",
                lag=str(p.lag),
                eta=_eta(p.eta_s),
            )

        try:
            results = rebuild_many(svc, names, to_version, embedder, progress=show, wait_s=wait_s)
        except ProjectionStalledError as exc:
            if task is not None:
                bar.stop()
                task = None
            with svc.pool.connection() as conn:
                left = [v for v in versions.versions(conn) if v.name in names and v.state == "building"]
            print(f"error: replay stopped: {exc}", file=sys.stderr)
            for v in left:
                print(
                    f"  {v.id} stays building (the serving version still serves): run `memledger replay"
                    f" {v.name}` again to resume it from its positions once the cause is fixed, or"
                    f" `memledger retire {v.name} --version {v.version}`",
                    file=sys.stderr,
                )
            raise typer.Exit(1) from None
        finally:
            if task is not None:
                bar.stop()
    dicts = [r.to_dict() for r in results]
    emit(
        as_json,
        dicts[0] if len(dicts) == 1 else dicts,
        lambda: "\n".join(
            f"{r.projection}_v{r.serving} serves now ({r.events} events in {r.seconds:.1f}s);"
            f" {r.projection}_v{r.previous} is kept: memledger rollback {r.projection} | memledger retire"
            f" {r.projection} --version {r.previous}"
            for r in results
        ),
    )


def rollback_cmd(
    projection: ProjectionArg,
    wait_s: Annotated[float, typer.Option(help="longest wait for a worker at the swap, seconds")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Swap PROJECTION back to the version that served before the last swap."""
    name = _name(projection)
    with services(projections=()) as svc:
        result = rollback(svc, name, wait_s=wait_s)
    emit(
        as_json,
        result.to_dict(),
        f"{name}_v{result.serving} serves again; {name}_v{result.previous} is kept as previous",
    )


def retire_cmd(
    projection: ProjectionArg,
    version: Annotated[int, typer.Option(help="the version to retire (not the serving one)")],
    as_json: JsonOpt = False,
) -> None:
    """Retire a version of PROJECTION: drop its tables, collection or cache keys and stop
    applying it. A building version may be retired too (abandoning its rebuild)."""
    name = _name(projection)
    started = time.monotonic()
    with services(projections=()) as svc:
        info = retire(svc, name, version)
    out = {"projection": name, "version": version, "was": info.state, "seconds": round(time.monotonic() - started, 3)}
    emit(as_json, out, f"{info.id} retired (was {info.state}); its storage is dropped")


def versions_cmd(as_json: JsonOpt = False) -> None:
    """Every projection version: state (building, serving, previous, retired), embedder,
    when created and swapped."""
    with services(own_vectors=False, projections=()) as svc, svc.pool.connection() as conn:
        found = versions.versions(conn)
    rows = [v.to_dict() for v in found]

    def text() -> str:
        lines = [f"{'projection':<14} {'state':<9} {'created (UTC)':<20} {'swapped (UTC)':<20} embedder"]
        for v in found:
            e = v.embedder
            lines.append(
                f"{v.id:<14} {v.state:<9} {v.created_at:%Y-%m-%d %H:%M:%S}  "
                f"{'-' if v.swapped_at is None else f'{v.swapped_at:%Y-%m-%d %H:%M:%S}':<20} "
                f"{'' if e is None else f'{e.name} ({e.model}, {e.dim}-d)'}"
            )
        return "\n".join(lines)

    emit(as_json, rows, text)


def register(app: typer.Typer) -> None:
    app.command()(replay)
    app.command("rollback")(rollback_cmd)
    app.command("retire")(retire_cmd)
    app.command("versions")(versions_cmd)
