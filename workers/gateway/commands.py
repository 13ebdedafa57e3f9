"""The ledger commands a request makes, for every way in (HTTP, the CLI, agent tools).

The one rule about who wrote a memory lives here: ``provenance.writer`` is the
authenticated principal, always; what the agent calls itself goes to
``provenance.agent``, recorded as its label and never as a principal.
"""

from __future__ import annotations

from datetime import datetime

from contracts import EraseMemories, MemoryWrite, RedactMemory, RevokeConsent, utc_now
from ledger.state import MemoryHead
from workers import wire
from workers.gateway.errors import InvalidRequestError


def parse_scope(value: str, subject_id: str) -> dict[str, str]:
    """``subject``, ``document:ID`` or ``workspace:ID`` as a command's ``scope`` field.

    Raises:
        InvalidRequestError: field ``scope``, for anything else.
    """
    if value == "subject":
        return {"type": "subject", "id": subject_id}
    kind, _, ident = value.partition(":")
    if kind not in ("document", "workspace") or not ident:
        raise InvalidRequestError("scope", f"{value!r} must be subject, document:ID or workspace:ID")
    return {"type": kind, "id": ident}


def scope_text(head: MemoryHead) -> str:
    """A memory's scope as ``parse_scope`` reads it."""
    return "subject" if head.scope_type == "subject" else f"{head.scope_type}:{head.scope_id}"


def memory_write(subject_id: str, req: wire.WriteMemory, writer: str, now: datetime | None = None) -> MemoryWrite:
    """The ``MemoryWrite`` of ``req`` for ``subject_id``, written by principal ``writer``
    at ``now`` (default: UTC now).

    Raises:
        InvalidRequestError: a malformed ``scope``.
        pydantic.ValidationError: the command breaks a rule of the contract (naming the field).
    """
    return MemoryWrite.model_validate(
        {
            "subject_id": subject_id,
            "kind": req.kind,
            "content": req.content,
            "purpose": req.purpose,
            "scope": parse_scope(req.scope, subject_id),
            "key": req.key,
            "sensitivity": req.sensitivity,
            "retention": {"basis": req.basis, "expires_at": req.expires_at},
            "provenance": {
                "writer": writer,
                "agent": req.agent,
                "written_at": now or utc_now(),
                "consent_ref": req.consent_ref,
                "turn_id": req.turn_id,
                "tool_call_id": req.tool_call_id,
                "source_ref": req.source_ref,
                "derived_from": tuple(req.derived_from),
            },
            "confirmed": req.confirmed,
            "confidence": req.confidence,
            "veracity": req.veracity or ("inferred" if req.kind == "inference" else "stated"),
        }
    )


def replacement(
    subject_id: str,
    old: MemoryHead,
    req: wire.Supersede,
    writer: str,
    purpose: str | None = None,
    scope: str | None = None,
) -> MemoryWrite:
    """The ``MemoryWrite`` that replaces ``old``: fields ``req`` leaves out come from the
    old memory, except where the replacement came from (turn, tool call, source: a new
    statement) and ``confirmed``: as ``req`` gives it, false when left out, and then the
    caller passes ``Ledger.supersede``'s ``confirmed_if_active`` (``leaves_confirmed``),
    so that the ledger decides it on the old memory's state when it supersedes it, after
    its retry check. The purpose and scope are the old memory's unless given (the ledger
    refuses a change: the CLI passes what its user typed, to get that refusal). Raises as
    ``memory_write``."""
    return memory_write(
        subject_id,
        wire.WriteMemory(
            content=req.content,
            purpose=purpose or old.purpose,
            kind=req.kind or old.kind,  # type: ignore[arg-type]
            scope=scope or scope_text(old),
            key=req.key if req.key is not None else old.key,
            sensitivity=req.sensitivity or old.sensitivity,  # type: ignore[arg-type]
            expires_at=req.expires_at,
            basis=req.basis or old.retention_basis,  # type: ignore[arg-type]
            consent_ref=req.consent_ref or old.consent_ref,
            turn_id=req.turn_id,
            tool_call_id=req.tool_call_id,
            source_ref=req.source_ref,
            derived_from=list(old.derived_from) if req.derived_from is None else req.derived_from,
            confirmed=bool(req.confirmed),
            veracity=req.veracity,
            agent=req.agent,
        ),
        writer,
    )


def leaves_confirmed(req: wire.Supersede) -> bool:
    """Whether ``req`` leaves the replacement's ``confirmed`` to the ledger (its default:
    confirmed if the old memory is active, ``Ledger.supersede``'s ``confirmed_if_active``)."""
    return req.confirmed is None


def erase_command(subject_id: str, req: wire.Erase) -> EraseMemories:
    """The ``EraseMemories`` of ``req``. Raises pydantic.ValidationError (field
    ``memory_ids``) unless exactly one target is given."""
    return EraseMemories(
        subject_id=subject_id,
        memory_ids=tuple(req.memory_ids),
        whole_subject=req.whole_subject,
        source_ref=req.source,
        reason=req.reason,
        legal_basis=req.legal_basis,
        with_history=req.with_history,
    )


def revoke_command(subject_id: str, req: wire.RevokeConsent) -> RevokeConsent:
    """The ``RevokeConsent`` of ``req``. Raises pydantic.ValidationError (field
    ``consent_ref``) when neither a consent reference nor a purpose is given."""
    return RevokeConsent(
        subject_id=subject_id, consent_ref=req.consent_ref, purpose=req.purpose, allow_unmatched=req.allow_unmatched
    )


def redact_command(memory_id: str, req: wire.Redact) -> RedactMemory:
    """The ``RedactMemory`` of ``req``."""
    return RedactMemory(memory_id=memory_id, replacement=req.replacement, fields=tuple(req.fields))
