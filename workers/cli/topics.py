"""``memledger topics create|check``: the Kafka topics of the distributed mode and the
settings the ledger's guarantees need (``ledger.topics``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ledger import topics
from workers.bootstrap import republish_tombstones, topic_specs
from workers.cli.util import emit
from workers.settings import Settings

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]

topics_app = typer.Typer(help="Create or check the Kafka topics (distributed mode).", no_args_is_help=True)


def _report(settings: Settings, created: list[str]) -> tuple[list[dict[str, Any]], int]:
    assert settings.kafka_bootstrap is not None
    specs = topic_specs(settings)
    found = topics.describe(settings.kafka_bootstrap, [s.name for s in specs])
    rows: list[dict[str, Any]] = []
    wrong = 0
    for spec in specs:
        state = found[spec.name]
        problems = [str(p) for p in topics.problems(spec, state)]
        wrong += len(problems)
        rows.append(
            {
                "topic": spec.name,
                "role": spec.role,
                "exists": state.exists,
                "created": spec.name in created,
                "partitions": state.partitions,
                "required": {
                    "partitions": spec.partitions,
                    **spec.configs,
                    **{k: f">= {v}" for k, v in spec.minimums.items()},
                },
                "problems": problems,
            }
        )
    return rows, wrong


def _render(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        verdict = "ok" if not r["problems"] else "; ".join(r["problems"])
        made = " (created)" if r["created"] else ""
        lines.append(f"{r['role']:<13} {r['topic']}{made}: {verdict}")
    return "\n".join(lines)


def _settings() -> Settings:
    settings = Settings()
    if settings.kafka_bootstrap is None:
        raise ValueError("MEMLEDGER_KAFKA_BOOTSTRAP: not set: the embedded mode keeps its log in PostgreSQL, no topics")
    return settings


@topics_app.command("check")
def check(as_json: JsonOpt = False) -> None:
    """Check that the events, tombstone and dead-letter topics exist with the settings the
    ledger needs; exit 1, naming each topic and setting, when one does not."""
    settings = _settings()
    rows, wrong = _report(settings, [])
    emit(as_json, rows, lambda: _render(rows))
    if wrong:
        raise typer.Exit(1)


@topics_app.command("create")
def create(as_json: JsonOpt = False) -> None:
    """Create the missing topics with the settings the ledger needs (an existing topic is
    never changed), then check them all as ``topics check`` does. A tombstone topic it
    creates gets every tombstone of the ledger's table (MEMLEDGER_POSTGRES_DSN)."""
    settings = _settings()
    assert settings.kafka_bootstrap is not None
    created = topics.create_missing(settings.kafka_bootstrap, topic_specs(settings), settings.partitions)
    if settings.tombstone_topic in created and settings.postgres_dsn is not None:
        republish_tombstones(settings)  # a new tombstone topic starts with every tombstone, not empty
    rows, wrong = _report(settings, created)
    emit(as_json, rows, lambda: _render(rows))
    if wrong:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")
