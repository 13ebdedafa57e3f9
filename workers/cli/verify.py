"""``memledger verify PROJECTION``: compare a live projection with a fresh fold of the log
(its own apply code) and with the reference fold (``projections.reference``)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from projections.verify import VERIFIABLE, VerifyReport, verify_postgres, verify_vectors
from workers.cli.data import progress_bar
from workers.cli.util import services

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]


def verify(
    projection: Annotated[str, typer.Argument(help="facts | summaries | vectors | all")],
    as_json: JsonOpt = False,
) -> None:
    """Fold the log up to the serving version of PROJECTION's stored positions into a
    scratch target with the projection's own code and compare it with that version: per-subject checksums,
    then every differing row and column (memory text only as a fingerprint); compare the
    version with the reference fold of the same records too (the specification, sharing no
    apply code). Exit status 1 when either differs. In distributed mode, checking vectors needs the vectors worker
    (or a Qdrant server) to read the live points."""
    name = projection.split("_v")[0]
    if name not in (*VERIFIABLE, "all"):
        raise typer.BadParameter(f"projection: must be one of {', '.join(VERIFIABLE)} or all")
    names = VERIFIABLE if name == "all" else (name,)
    reports: list[VerifyReport] = []
    with services(projections=("facts", "summaries")) as svc, progress_bar(not as_json) as progress:
        serving = svc.stores.serving()  # the versions readers see now
        for n in names:
            version = serving[n].version
            if n == "vectors":
                route = svc.stores.route()
                if route.index is None or route.embedder is None:
                    raise typer.BadParameter("projection: no vector index is configured")
                if svc.stores.owns(version):
                    # the collection is created by the first projection run (none before
                    # the first write); verify an empty one rather than fail on its absence
                    route.index.ensure_collection(route.embedder.dim)
                reports.append(
                    verify_vectors(svc.pool, svc.keyring, svc.log, route.index, route.embedder, version, progress)
                )
            else:
                table: Literal["facts", "summaries"] = "facts" if n == "facts" else "summaries"
                reports.append(verify_postgres(svc.pool, svc.keyring, svc.log, table, version, progress))
    if as_json:
        print(json.dumps({"ok": all(r.ok for r in reports), "projections": [r.to_dict() for r in reports]}, indent=2))
    else:
        print("\n".join(r.render() for r in reports))
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(verify)
