"""Commands of the service: serve, keys (create, list, revoke), audit, memories."""

from __future__ import annotations

from typing import Annotated

import typer

from ledger.principals import check_subject
from projections.facts import STABLE
from projections.memories import MemoryEntry, list_memories
from projections.wording import counted, one_line
from workers.cli import util as cliutil
from workers.cli.recall_text import utc_text
from workers.cli.util import emit, project_if_embedded, services
from workers.gateway import SCOPES, ApiKey, AuditLog, KeyStore
from workers.gateway.schema import install as install_gateway_tables

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
keys_app = typer.Typer(
    help="API keys of memledger serve: bearer tokens, stored as SHA-256 hashes.", no_args_is_help=True
)


def serve(
    host: Annotated[
        str, typer.Option(help="address to listen on (not loopback: needs an API key first)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port)", min=0, max=65535)] = 8765,
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /openapi.json, docs at /docs) until Ctrl-C or
    SIGTERM. In the embedded mode it owns the data directory, applies every projection
    in the background, and the other memledger commands on that directory go through it."""
    from workers.serve.runtime import run_serve

    run_serve(cliutil.settings(), host, port)


def _key_dict(key: ApiKey) -> dict[str, object]:
    return {
        "key_id": key.key_id,
        "principal": key.principal,
        "scopes": list(key.scopes),
        "subjects": list(key.subjects),
        "label": key.label,
        "operator": key.operator,
        "created_at": key.created_at,  # emit writes every datetime in the API's form
        "revoked_at": key.revoked_at,
    }


def keys_create(
    principal: Annotated[str, typer.Argument(help="who the key authenticates (its writes are written by it)")],
    scope: Annotated[list[str], typer.Option(help=f"{' | '.join(SCOPES)} (repeat)")],
    subject: Annotated[
        list[str] | None, typer.Option(help="subjects it may act on, shell patterns like user-* (repeat)")
    ] = None,
    label: Annotated[str | None, typer.Option(help="what the key is for")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an API key for PRINCIPAL and print its token (once: only its hash is kept).
    Deny by default: without --subject it may act on no subject."""
    with services(own_vectors=False, projections=()) as svc:
        svc.principal().require("erase", "*")  # the local operator manages keys
        with svc.pool.connection() as conn:
            install_gateway_tables(conn)
        key, token = KeyStore(svc.pool).create(principal, scope, subject or [], label)
    emit(
        as_json,
        _key_dict(key) | {"token": token},
        lambda: (
            f"key {key.key_id} for {key.principal}: scopes {', '.join(key.scopes)};"
            f" subjects {', '.join(key.subjects) or '(none)'}\n"
            f"token (shown once, keep it secret): {token}"
        ),
    )


def keys_list(as_json: JsonOpt = False) -> None:
    """Every API key (never a token): principal, scopes, subjects, created and revoked (UTC)."""
    with services(own_vectors=False, projections=()) as svc:
        svc.principal().require("erase", "*")
        with svc.pool.connection() as conn:
            install_gateway_tables(conn)
        found = KeyStore(svc.pool).list()

    def text() -> str:
        if not found:
            return "no API keys (memledger keys create PRINCIPAL --scope read --subject 'user-*')"
        lines = [f"{'key id':<17} {'principal':<20} {'scopes':<24} {'state':<28} subjects"]
        for k in found:
            state = f"revoked {utc_text(k.revoked_at)}" if k.revoked_at else "live"
            who = one_line(k.principal) + (" (operator)" if k.operator else "")
            lines.append(
                f"{k.key_id:<17} {who:<20} {','.join(k.scopes):<24} {state:<28}"
                f" {one_line(', '.join(k.subjects)) or '-'}"
            )
        return "\n".join(lines)

    emit(as_json, [_key_dict(k) for k in found], text)


def keys_revoke(key_id: str, as_json: JsonOpt = False) -> None:
    """Revoke KEY_ID: every request with it fails from now on, in every API process."""
    with services(own_vectors=False, projections=()) as svc:
        svc.principal().require("erase", "*")
        with svc.pool.connection() as conn:
            install_gateway_tables(conn)
        key = KeyStore(svc.pool).revoke(key_id)
    emit(as_json, _key_dict(key), f"key {key.key_id} of {key.principal} revoked at {utc_text(key.revoked_at)}")


def audit(
    limit: Annotated[int, typer.Option(help="how many entries, newest first", min=1, max=1000)] = 50,
    subject: Annotated[str | None, typer.Option(help="only this subject's")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit log of memledger serve: refused attempts, erasures, traces and exports,
    with time (UTC), principal, key, subject, route or tool, outcome and reason."""
    if subject is not None:
        check_subject(subject)  # an empty one would match no entry, silently
    with services(own_vectors=False, projections=()) as svc:
        svc.principal().require("erase", "*")
        with svc.pool.connection() as conn:
            install_gateway_tables(conn)
        entries, _ = AuditLog(svc.pool).list(limit, None, subject)
    rows = [
        {
            "id": e.id,
            "at": e.at,
            "principal": e.principal,
            "key_id": e.key_id,
            "subject_id": e.subject_id,
            "route": e.route,
            "outcome": e.outcome,
            "reason": e.reason,
        }
        for e in entries
    ]

    def text() -> str:
        if not entries:
            return "no audit entries"
        return "\n".join(
            f"{utc_text(e.at)} {e.outcome:<7} {one_line(e.principal or '-'):<16} {one_line(e.subject_id or '-'):<16}"
            f" {e.route}: {one_line(e.reason)}"
            for e in entries
        )

    emit(as_json, rows, text)


def memories(
    subject: str,
    include_all: Annotated[
        bool, typer.Option("--all", help="every status: superseded, revoked, expired, erased")
    ] = False,
    limit: Annotated[int, typer.Option(help="at most this many", min=1, max=500)] = 500,
    after: Annotated[str | None, typer.Option(help="start after this memory id (paging)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """SUBJECT's memories with status, revision, key and what superseded what (live ones
    unless --all). Needs a read or an erase grant; the text and the key are shown with a read
    grant only."""
    with services(own_vectors=False, projections=("facts",)) as svc:
        content = svc.principal().may_list(subject)
        project_if_embedded(svc)
        page = list_memories(
            svc.pool, STABLE, subject, include_all=include_all, with_content=content, limit=limit, after=after
        )
    data = {"memories": [_entry_dict(m) for m in page.memories], "next_after": page.next_after}
    emit(as_json, data, lambda: render_memories(page.memories, subject, page.next_after))


def _entry_dict(m: MemoryEntry) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(m)  # its times are datetimes, which emit writes in the API's form


def render_memories(entries: list[MemoryEntry], subject: str, next_after: str | None) -> str:
    """One block per memory: id, status, revision, kind, key; then what it superseded or
    what superseded it; then its text (when shown)."""
    if not entries:
        return f"no memories of {one_line(subject)}"
    lines = [f"{counted(len(entries), 'memory', 'memories')} of {one_line(subject)}:"]
    for m in entries:
        if m.status == "erased":
            lines.append(f"  {m.memory_id} erased by {m.erased_by} at {utc_text(m.erased_at)}")
            continue
        key = f" key {one_line(m.key)}" if m.key else ""
        lines.append(f"  {m.memory_id} {m.status} rev {m.revision} {m.kind}{key} ({one_line(m.purpose or '-')})")
        if m.superseded_by:
            lines.append(f"      superseded by {m.superseded_by}")
        if m.supersedes:
            lines.append(f"      supersedes {', '.join(m.supersedes)}")
        if m.content is not None:
            lines.append(f"      {one_line(m.content)}")
    if next_after:
        lines.append(f"more: memledger memories {subject} --after {next_after}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(audit)
    app.command()(memories)
    keys_app.command("create")(keys_create)
    keys_app.command("list")(keys_list)
    keys_app.command("revoke")(keys_revoke)
    app.add_typer(keys_app, name="keys")
