"""Helpers shared by the CLI modules: building services, parsing, printing."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from contracts import iso_utc
from projections.errors import ProjectionStalledError
from projections.runner import RetryPolicy
from workers.bootstrap import PROJECTION_NAMES, Services, build
from workers.settings import Settings


class CliState:
    """Options given before the command (``memledger --data-dir D --principal P ...``)."""

    data_dir: Path | None = None
    principal: str | None = None


STATE = CliState()

_SHARED: list[Services] = []
"""The services of ``memledger serve``, when the CLI's commands run inside it."""


def share(svc: Services) -> None:
    """Run every later command of this process on ``svc`` (``memledger serve``: the
    stores are open already and owned by it), never closing it."""
    _SHARED[:] = [svc]


def settings() -> Settings:
    overrides: dict[str, Any] = {}
    if STATE.data_dir is not None:
        overrides["data_dir"] = STATE.data_dir
    if STATE.principal is not None:
        overrides["principal"] = STATE.principal
    return Settings(**overrides)


@contextmanager
def services(
    own_vectors: bool | None = None,
    projections: tuple[str, ...] = PROJECTION_NAMES,
    tolerate_topic_problems: bool = False,
) -> Iterator[Services]:
    """Build services for one command and close them afterwards. In embedded mode the
    process owns every store; in distributed mode the CLI reads vectors from the server
    or from the vectors worker. ``tolerate_topic_problems``: a topic's wrong setting is a
    warning, not a refusal (``workers.bootstrap.build``)."""
    if _SHARED:  # inside memledger serve: its open stores, acting as this command's principal
        shared = _SHARED[0]
        yield replace(shared, settings=shared.settings.model_copy(update={"principal": settings().principal}))
        return
    cfg = settings()
    own = cfg.mode == "embedded" if own_vectors is None else own_vectors
    svc = build(cfg, own_vectors=own, projections=projections, tolerate_topic_problems=tolerate_topic_problems)
    try:
        yield svc
    finally:
        svc.close()


EMBEDDED_RETRY = RetryPolicy(initial_s=0.2, max_s=2.0, max_attempts=5)
"""In-process projections give up after about 4 s; the events stay in the log."""


def project_if_embedded(svc: Services) -> None:
    """In the embedded mode projections run in-process: apply what was just appended.
    A store that stays down does not fail the command (its events are in the log): the
    projection is reported pending and catches up on the next command."""
    if svc.settings.mode != "embedded":
        return
    try:
        svc.catch_up(retry=EMBEDDED_RETRY)
    except ProjectionStalledError as exc:
        warn(f"warning: {exc}; the events are in the log and will be applied by the next command")


def parse_time(value: str | None, field: str) -> datetime | None:
    """Parse ISO 8601 with a zone ("2026-01-01T00:00:00Z"); a naive time is refused."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{field}: not an ISO 8601 time: {value!r}") from None
    if moment.tzinfo is None:
        example = value if "T" in value or " " in value else f"{value}T00:00:00"
        raise typer.BadParameter(f"{field}: must include a timezone, e.g. {example}Z or {example}+00:00")
    try:
        moment.astimezone(UTC)
    except OverflowError:  # year 1 ahead of UTC, or year 9999 behind it
        raise typer.BadParameter(
            f"{field}: must be a time UTC can hold: between 0001-01-01 and 9999-12-31 in UTC"
        ) from None
    return moment


def emit(as_json: bool, data: Any, text: Callable[[], str] | str) -> None:
    """Print ``data`` as JSON (every datetime in it as ISO 8601 UTC with ``Z``,
    ``contracts.iso_utc``, as the HTTP API gives times), or the human text."""
    if as_json:
        print(json.dumps(data, indent=2, default=_json_value))
    else:
        print(text() if callable(text) else text)


def _json_value(value: object) -> str:
    """A value ``json`` cannot write: a datetime in the API's form, anything else as text."""
    return iso_utc(value) if isinstance(value, datetime) else str(value)


def warn(message: str) -> None:
    print(message, file=sys.stderr)
