"""Shared field types: UTC timestamps, identifiers and the vocabulary of a memory.

Every timestamp in the system is timezone-aware UTC (DESIGN.md, invariant 7). A naive
datetime is rejected by pydantic's ``AwareDatetime`` with the field name in the error;
an aware datetime in another zone is converted to UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, StringConstraints


def _to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 ahead of UTC, or year 9999 behind it
        raise ValueError("must be a time UTC can hold: between 0001-01-01 and 9999-12-31 in UTC") from None


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]
"""A timezone-aware datetime, normalised to UTC. Naive datetimes are rejected, and so are
times UTC cannot hold (year 1 ahead of UTC)."""

MAX_ID_BYTES = 512
"""The longest identifier, in bytes of UTF-8."""


_CONTROL = re.compile("[\x00-\x1f\x7f]")
"""Control characters (C0 and DEL), which no identifier may contain."""

_CONTROL_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters but tab, newline and carriage return, which no text may contain."""


UNENCODABLE = "must be valid Unicode: a lone surrogate has no UTF-8 encoding"
"""The rule a text with a lone surrogate breaks (it has no UTF-8 encoding)."""


def identifier_problem(value: str) -> str | None:
    """The rule of an identifier (subject, purpose, key, agent, ...) that ``value`` breaks,
    as the message to show, or ``None``: more than white space, no control characters, valid
    Unicode, at most ``MAX_ID_BYTES`` bytes in UTF-8."""
    if not value.strip():
        return "must not be empty or only white space"
    if _CONTROL.search(value):
        return "must not contain control characters"
    if len(value) * 4 <= MAX_ID_BYTES and value.isascii():  # <= 4 bytes a character
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return UNENCODABLE
    return f"must be at most {MAX_ID_BYTES} bytes in UTF-8" if size > MAX_ID_BYTES else None


def _identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def text_problem(value: str) -> str | None:
    """The rule of text (memory content, a recall query) that ``value`` breaks, as the
    message to show, or ``None``: more than white space, no control characters but tab,
    newline and carriage return (PostgreSQL's text refuses NUL), and valid Unicode (a lone
    surrogate has no UTF-8 encoding)."""
    if not value.strip():
        return "must contain more than white space"
    if _CONTROL_IN_TEXT.search(value):
        return "must not contain control characters (tab, newline and carriage return are allowed)"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return UNENCODABLE
    return None


def _text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


NonEmptyStr = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=512), AfterValidator(_identifier)
]
"""An identifier-like string: 1 to 512 characters (and bytes in UTF-8) after stripping
white space, no control characters."""

Content = Annotated[str, StringConstraints(min_length=1, max_length=65_536), AfterValidator(_text)]
"""Memory text: 1 to 65,536 characters, not only white space, no control characters but
tab, newline and carriage return."""


def _canonical_id(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


MemoryId = Annotated[
    str,
    BeforeValidator(_canonical_id),
    StringConstraints(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
]
"""A memory id: a UUID in canonical text form (the ledger assigns UUIDv7, RFC 9562)."""

Kind = Literal["preference", "fact", "inference", "task_state", "summary"]
Sensitivity = Literal["public", "internal", "personal", "restricted"]
RetentionBasis = Literal["session", "consent", "contract", "indefinite"]
ScopeType = Literal["document", "workspace", "subject"]
MemoryStatus = Literal["active", "superseded", "needs_confirmation", "revoked", "expired", "erased"]
Veracity = Literal["stated", "inferred", "imported", "tool"]

VERACITY_CONFIDENCE: dict[str, float] = {
    "stated": 1.0,
    "inferred": 0.7,
    "imported": 0.6,
    "tool": 0.5,
}
"""Initial confidence by veracity, as DESIGN.md gives it (stated by a human 1.0,
inferred by an agent 0.7, imported 0.6, produced by a tool 0.5)."""


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def iso_utc(moment: datetime) -> str:
    """``moment`` (timezone-aware) as ISO 8601 in UTC ending in ``Z``, with microseconds
    when it has any: ``2026-12-02T07:03:06.109607Z``, as pydantic writes the HTTP API's
    times: the form of every time in the CLI's ``--json`` output and in the times
    the projections return as text.

    Raises:
        ValueError: ``moment`` is naive (invariant 7: a naive datetime is an error), or
            outside what UTC can hold.
    """
    if moment.utcoffset() is None:
        raise ValueError(f"time: {moment.isoformat()} is naive; a time must be timezone-aware (UTC)")
    try:
        return moment.astimezone(UTC).isoformat().removesuffix("+00:00") + "Z"
    except OverflowError:  # year 1 ahead of UTC, or year 9999 behind it
        raise ValueError(f"time: {moment.isoformat()} is outside UTC's range (0001-01-01 to 9999-12-31)") from None


def with_article(word: str) -> str:
    """``word`` (a kind or a class: ``internal``, ``inference``, ``summary``) with its
    indefinite article: ``an internal``, ``a summary``."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"
