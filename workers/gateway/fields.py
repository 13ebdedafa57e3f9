"""The names a refusal gives fields, on each surface.

The ledger and the contracts name a field by its place in the command
(``provenance.consent_ref``, ``retention.expires_at``) and a flag by the command's own
field (``allow_unmatched``). The HTTP API's bodies are flat (``consent_ref``,
``expires_at``) and the CLI's options are spelled with dashes (``--consent-ref``). This
table is the one place that translates them:

- the *field* of a refusal becomes the HTTP body's field, on both surfaces (the CLI
  names fields as the HTTP API does, ``error: consent_ref: ...``, as it names
  ``purpose`` or ``subject_id``);
- a name in the *rule's text* becomes what the caller of that surface types: the body's
  field over HTTP, the option on the CLI (``give --allow-unmatched to ...``).

Names not in the table are the same everywhere (``purpose``, ``memory_id``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from contracts.serialization import validation_problems as contract_problems

Surface = Literal["http", "cli"]


@dataclass(frozen=True)
class Name:
    """How the HTTP body (``field``) and the CLI (``option``) name one field."""

    field: str
    option: str


NAMES: Mapping[str, Name] = {
    "provenance.consent_ref": Name("consent_ref", "--consent-ref"),
    "provenance.turn_id": Name("turn_id", "--turn-id"),
    "provenance.tool_call_id": Name("tool_call_id", "--tool-call-id"),
    "provenance.source_ref": Name("source_ref", "--source-ref"),
    "provenance.derived_from": Name("derived_from", "--derived-from"),
    "provenance.agent": Name("agent", "--agent"),
    "retention.expires_at": Name("expires_at", "--expires-at"),
    "retention.basis": Name("basis", "--basis"),
    "scope.type": Name("scope", "--scope"),
    "scope.id": Name("scope", "--scope"),
    "allow_unmatched": Name("allow_unmatched", "--allow-unmatched"),
}
"""The ledger's and the contracts' name of a field: its names on the surfaces."""

_IN_TEXT = re.compile(
    r"(?<![\w.-])(" + "|".join(re.escape(n) for n in sorted(NAMES, key=len, reverse=True)) + r")(?![\w])"
)


def field_name(field: str) -> str:
    """The field as a refusal names it on every surface (``provenance.consent_ref`` ->
    ``consent_ref``); a field the table does not know, as it is."""
    name = NAMES.get(field)
    return field if name is None else name.field


def in_words(text: str, surface: Surface) -> str:
    """``text`` (a rule) with each name of the table in it replaced by the surface's:
    the body's field for ``http``, the option for ``cli``. A name is replaced only as a
    whole word (not inside a longer name)."""

    def spelled(found: re.Match[str]) -> str:
        name = NAMES[found.group(1)]
        return name.option if surface == "cli" else name.field

    return _IN_TEXT.sub(spelled, text)


def refusal(field: str, rule: str, surface: Surface) -> tuple[str, str]:
    """A refusal's ``(field, rule)`` in the surface's words."""
    return field_name(field), in_words(rule, surface)


def line(text: str, surface: Surface) -> str:
    """A refusal already written as ``field: rule`` (a ``ValueError``'s message), in the
    surface's words; a text without such a field only has its names replaced."""
    field, sep, rule = text.partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_][\w.\-]*", field):
        return ": ".join(refusal(field, rule, surface))
    return in_words(text, surface)


def validation_problems(exc: ValidationError, surface: Surface) -> list[tuple[str, str]]:
    """``(field, rule)`` of each problem pydantic found, in the surface's words; the
    field is empty for a rule of the whole model (whose message names its field itself:
    ``memory_ids: give ...``). Pydantic's ``Value error, `` prefix and URLs are left out."""
    out = []
    for loc, rule in contract_problems(exc):
        if loc:
            out.append(refusal(loc, rule, surface))
        else:
            field, sep, own = rule.partition(": ")
            out.append(refusal(field, own, surface) if sep else ("", in_words(rule, surface)))
    return out


def describe_validation(exc: ValidationError, surface: Surface) -> str:
    """One line for a ``ValidationError``: ``field: rule`` per problem, joined by ``; ``,
    in the surface's words (``contracts.describe_validation_error`` in the ledger's)."""
    return "; ".join(f"{f}: {r}" if f else r for f, r in validation_problems(exc, surface))
